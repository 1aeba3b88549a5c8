"""Chaos: a real fleet under a random fault schedule, and a checker that proves what held.

``python -m bench.chaos --seed N --duration SECONDS --replicas N --topology single`` starts a
private Redis, real ``fleetgate-replica`` processes on the chaos handler, a producer and an
operator (``Fleet`` and the CLI), runs the fault schedule drawn from the seed, and writes
everything that happens as JSON lines (one file per process). The checker then reads that
history and proves each rule or names its first counterexample.

The modules, one noun each: ``settings``, ``faults`` (the kinds and the schedule), ``history``
(writing and reading the JSON lines), ``handler`` (what the replicas run), ``proxy`` (the slow
or cut link), ``server`` (the restartable Redis), ``replicas`` (the processes), ``observer``
(what Redis shows), ``producer``, ``operator``, ``injector`` (carries the faults out),
``runner`` (the phases), ``timeline``, ``checker`` (the rules) and ``verdict`` (their
outcome), ``report`` (the output).
"""
