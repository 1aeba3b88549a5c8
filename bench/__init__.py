"""fleetgate benchmarks: ratios against a baseline measured in the same run.

``FLEETGATE_BENCH_QUICK=1`` shrinks every benchmark to a smoke run (seconds, not minutes): the
test suite uses it to show that ``make bench`` works; its figures are not the README's.
"""

import os

QUICK = os.environ.get("FLEETGATE_BENCH_QUICK", "") not in ("", "0")
