"""The replica process: the stream source, handlers, breaker, settings, HTTP and metrics, and\nthe service that ties them to a controller. Imports every layer below it."""
