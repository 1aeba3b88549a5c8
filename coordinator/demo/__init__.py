"""``fleetgate demo``: a whole fleet on this machine, with a Redis of its own when needed."""
