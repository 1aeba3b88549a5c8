"""The Redis link both sides use: one connection factory for every URL form (``connect``;
``slots`` routes a Cluster), the redis-py workarounds every Redis await goes through
(``redisio``: ``uncancelled``, ``bounded``, ``cancel_bounded``), subscriptions (one pub/sub
connection per process, fanned out), ``tls`` (TLS connections that close at once when
dropped) and ``diagnose`` (what a failed connection means, in one line). Imports the contract and the leaves; never ``control``, ``service`` or ``coordinator``."""
