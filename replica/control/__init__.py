"""Following the fleet's pause state in Redis. Imports the contract and the pool.

``controller`` (FleetController, the façade that starts and stops the rest) over ``applier``
(the version rules), ``sync`` (the loop of polls and heartbeats), ``loss`` (the hold of
``control_loss="hold"`` when the state goes unread), ``outbox`` (what is owed to Redis, and the
fast path), ``record`` and ``channel``; ``options`` holds the controller's settings. The Redis link
(connections, the redis-py workarounds, subscriptions) is ``replica.link``, shared with the
coordinator."""
