"""A replica's labels from its settings: ``FLEETGATE_LABELS`` and, in Kubernetes, the pod's own
labels from a downwardAPI volume file (``FLEETGATE_LABELS_FILE``).

A downwardAPI file of ``metadata.labels`` has one ``key="value"`` a line, the value a quoted
string (Go's ``%q``, which JSON reads for the label characters). Both are checked by the
Kubernetes label rules (``replica.contract.selectors``); a bad one stops the replica before it
starts, with one line naming the variable.
"""

from __future__ import annotations

import json

from replica.contract.selectors import check_labels, format_labels, parse_labels
from replica.errors import ContractError


def canonical_labels(text: str) -> str:
    """``FLEETGATE_LABELS`` checked and sorted by key. Raises ``ValueError`` (the settings'
    one line)."""
    try:
        return format_labels(parse_labels(text))
    except ContractError as exc:
        raise ValueError(str(exc)) from None


def read_labels_file(path: str) -> dict[str, str]:
    """Labels from a downwardAPI file of ``metadata.labels``. Raises ``ValueError`` naming the
    file and the line."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read(1_000_000).splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        why = getattr(exc, "strerror", None) or str(exc)
        raise ValueError(f"FLEETGATE_LABELS_FILE: cannot read {path}: {why}") from None
    labels: dict[str, str] = {}
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        key, eq, raw = line.partition("=")
        try:
            value = json.loads(raw) if raw.startswith('"') else raw
        except ValueError:
            value = None
        if not eq or not isinstance(value, str):
            raise ValueError(f'FLEETGATE_LABELS_FILE: {path} line {n} is not key="value"')
        labels[key.strip()] = value
    try:
        return check_labels(labels)
    except ContractError as exc:
        raise ValueError(f"FLEETGATE_LABELS_FILE: {path}: {exc}") from None


__all__ = ["canonical_labels", "read_labels_file"]
