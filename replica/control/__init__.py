"""Following the fleet's pause state in Redis. Imports the contract and the pool.

``controller`` (FleetController, the façade that starts and stops the rest) over ``applier``
(the version rules), ``sync`` (the loop of polls and heartbeats), ``loss`` (the hold of
``control_loss="hold"`` when the state goes unread), ``outbox`` (what is owed to Redis, and the
fast path), ``record``, ``channel`` and ``subscription``; ``options`` holds the
controller's settings, ``redisio`` the redis-py workarounds every Redis await goes through."""
