#!/usr/bin/env bash
# Prints the newest Python >= 3.11 on PATH: python3.N from the newest down, then python3.
# Where there is none, says in one line on stderr which version is missing, and exits 1.
# Uses only bash builtins and the interpreters themselves, so it works on any PATH.
set -u
MIN_MINOR=11
MAX_MINOR=30
check='import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)'
for ((minor = MAX_MINOR; minor >= MIN_MINOR; minor--)); do
    candidate="python3.${minor}"
    if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c "$check" >/dev/null 2>&1; then
        echo "$candidate"
        exit 0
    fi
done
if command -v python3 >/dev/null 2>&1; then
    if python3 -c "$check" >/dev/null 2>&1; then
        echo python3
        exit 0
    fi
    found="$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || echo unknown)"
    echo "fleetgate needs Python 3.11 or newer: python3 on PATH is ${found}, and no python3.11 or newer was found (set PYTHON=/path/to/python3.X)" >&2
    exit 1
fi
echo "fleetgate needs Python 3.11 or newer: no python3.11 or newer, nor python3, on PATH (set PYTHON=/path/to/python3.X)" >&2
exit 1
