"""fleetgate coordinator side: the operator's control of a fleet (``Fleet``), the CLI, the API.

Imports ``replica`` (for the Redis contract); never the other way round.
"""

from coordinator.fleet import Fleet
from coordinator.models import AuditEvent, ReplicaInfo, ReplicaResult, WaitReport

__all__ = ["AuditEvent", "Fleet", "ReplicaInfo", "ReplicaResult", "WaitReport"]
