"""Following the fleet's pause state in Redis: the controller, its channel and record, and the\nredis-py workarounds every Redis await goes through. Imports the contract and the pool."""
