"""The coordinator's web side: the authenticated API, the dashboard, metrics and the server."""
