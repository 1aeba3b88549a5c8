"""What a request of the API works with: the runtime the lifespan opens (one Redis client and
the fleets on it), who calls (the Bearer token's operator), and the fleet it acts on.

``FleetCache`` makes a ``Fleet`` per fleet name on first use, all sharing the one Redis client,
and keeps at most ``MAX_CACHED_FLEETS`` of them besides the default fleet (``FLEETGATE_FLEET``),
least recently used out first (a ``Fleet`` the API uses holds no connection of its own, so one
let go costs nothing).

The checks, in order: a token (401), the admin role for a write (403), the fleet among those
the token is limited to (``fleets`` in ``FLEETGATE_TOKENS_FILE``: 403, whether or not the
fleet exists), then for a named fleet that must exist, that it does (404). An invalid fleet
name in the path is a 422 (``FleetName``).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Final

from fastapi import Depends, HTTPException, Path, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from redis.asyncio import Redis

from coordinator.fleet.calls import again
from coordinator.fleet.fleet import Fleet
from coordinator.fleet.snapshots import Snapshots
from coordinator.settings import CoordinatorSettings
from coordinator.web.auth import ANONYMOUS, Operator, TokenStore
from replica.contract import FLEET_NAME_RE
from replica.contract.keys import FLEETS_KEY

if TYPE_CHECKING:
    from coordinator.notify.consumer import Notifier
    from coordinator.web.watcher import FleetsWatcher

log = logging.getLogger(__name__)

MAX_CACHED_FLEETS: Final = 256
"""Fleet objects kept besides the default fleet's."""


class FleetCache:
    """One ``Fleet`` per name, made on first use, sharing one Redis client (bounded, LRU)."""

    def __init__(
        self, redis: Redis, default: str, size: int = MAX_CACHED_FLEETS, **options: Any
    ) -> None:
        self.redis = redis
        self.options = options
        """``Fleet``'s keyword options for every fleet (``min_replicas_ack``...)."""
        self.default = Fleet(redis, default, **options)
        self.size = size
        self._fleets: OrderedDict[str, Fleet] = OrderedDict()

    def get(self, name: str) -> Fleet:
        """The fleet named ``name``. Raises ``ContractError`` for an invalid name."""
        if name == self.default.name:
            return self.default
        fleet = self._fleets.get(name)
        if fleet is not None:
            self._fleets.move_to_end(name)
            return fleet
        fleet = self._fleets[name] = Fleet(self.redis, name, **self.options)
        while len(self._fleets) > self.size:
            self._fleets.popitem(last=False)
        return fleet

    def __len__(self) -> int:
        return len(self._fleets) + 1


class Runtime:
    """What the app needs at request time: settings, tokens, and what the lifespan opens."""

    def __init__(self, settings: CoordinatorSettings, tokens: TokenStore, insecure: bool) -> None:
        self.settings = settings
        self.tokens = tokens
        self.insecure = insecure
        self.redis: Redis | None = None
        self.fleets: FleetCache | None = None
        self.fleet: Fleet | None = None
        """The default fleet (``FLEETGATE_FLEET``)."""
        self.snapshots: Snapshots | None = None
        """The one read of each fleet's records that every view shares."""
        self.watcher: FleetsWatcher | None = None
        self.notifier: Notifier | None = None


@dataclass(frozen=True, slots=True)
class Access:
    """Who calls, and the fleet the request acts on (the operator may use it)."""

    operator: Operator
    fleet: Fleet


_bearer = HTTPBearer(auto_error=False, description="FLEETGATE_ADMIN_TOKEN or FLEETGATE_VIEW_TOKEN")
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
FleetName = Annotated[
    str,
    Path(
        pattern=f"^{FLEET_NAME_RE.pattern}$",
        max_length=63,
        description="A fleet name: [a-z0-9][a-z0-9_.-]{0,62}",
    ),
]


def runtime_of(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


def authenticate(runtime: Runtime, credentials: HTTPAuthorizationCredentials | None) -> Operator:
    """The caller (401 without a valid token)."""
    if runtime.insecure:
        return ANONYMOUS
    operator = runtime.tokens.authenticate(None if credentials is None else credentials.credentials)
    if operator is None:
        raise HTTPException(
            status_code=401,
            detail="a valid Bearer token is required",
            headers={"WWW-Authenticate": "Bearer"},
        )
    return operator


def viewer(request: Request, credentials: Credentials) -> Operator:
    """Any configured operator (admin or view)."""
    return authenticate(runtime_of(request), credentials)


def admin(request: Request, credentials: Credentials) -> Operator:
    """An operator with the admin role (403 for a view token)."""
    operator = authenticate(runtime_of(request), credentials)
    if not operator.can_write:
        raise HTTPException(status_code=403, detail=f"{operator.name} has a read-only token")
    return operator


def may_use(operator: Operator, fleet: str) -> None:
    """403 unless the operator's token is given ``fleet``."""
    if not operator.may_use(fleet):
        raise HTTPException(
            status_code=403, detail=f"the token of {operator.name} is not given fleet {fleet}"
        )


def fleets_of(request: Request) -> FleetCache:
    fleets = runtime_of(request).fleets
    if fleets is None:
        raise HTTPException(status_code=503, detail="the coordinator is starting")
    return fleets


def snapshots_of(request: Request) -> Snapshots:
    snapshots = runtime_of(request).snapshots
    if snapshots is None:
        raise HTTPException(status_code=503, detail="the coordinator is starting")
    return snapshots


async def known(fleet: Fleet, fleets: FleetCache) -> bool:
    """Whether ``fleet`` was ever seen: the default fleet, one in the registry, or one with a
    state, replicas or an audit trail in Redis (a fleet from before the registry)."""
    if fleet is fleets.default:
        return True
    redis = fleets.redis
    if await again(lambda: redis.zscore(FLEETS_KEY, fleet.name)) is not None:
        return True
    keys = fleet.keys
    return bool(await again(lambda: redis.exists(keys.state, keys.replicas, keys.audit)))


async def require_known(fleet: Fleet, fleets: FleetCache) -> None:
    """404 for a fleet never seen."""
    if not await known(fleet, fleets):
        raise HTTPException(status_code=404, detail=f"no fleet {fleet.name} on this Redis")


def _default(operator: Operator, request: Request) -> Access:
    fleets = fleets_of(request)
    may_use(operator, fleets.default.name)
    return Access(operator, fleets.default)


def default_view(request: Request, operator: Annotated[Operator, Depends(viewer)]) -> Access:
    """The legacy ``/api/fleet`` routes: the default fleet, to read."""
    return _default(operator, request)


def default_change(request: Request, operator: Annotated[Operator, Depends(admin)]) -> Access:
    """The legacy ``/api/fleet`` routes: the default fleet, to change."""
    return _default(operator, request)


async def named_view(
    request: Request, name: FleetName, operator: Annotated[Operator, Depends(viewer)]
) -> Access:
    """``/api/fleets/{name}``, to read: a fleet that exists (404 otherwise)."""
    may_use(operator, name)
    fleets = fleets_of(request)
    fleet = fleets.get(name)
    await require_known(fleet, fleets)
    return Access(operator, fleet)


def named_change(
    request: Request, name: FleetName, operator: Annotated[Operator, Depends(admin)]
) -> Access:
    """``/api/fleets/{name}``, to change: any valid name (a pause may come before the fleet's
    first replica)."""
    may_use(operator, name)
    return Access(operator, fleets_of(request).get(name))


Viewer = Annotated[Operator, Depends(viewer)]
Admin = Annotated[Operator, Depends(admin)]
DefaultView = Annotated[Access, Depends(default_view)]
DefaultChange = Annotated[Access, Depends(default_change)]
NamedView = Annotated[Access, Depends(named_view)]
NamedChange = Annotated[Access, Depends(named_change)]


__all__ = [
    "MAX_CACHED_FLEETS", "Access", "Admin", "DefaultChange", "DefaultView", "FleetCache",
    "FleetName", "NamedChange", "NamedView", "Runtime", "Viewer", "admin", "authenticate",
    "fleets_of", "known", "may_use", "require_known", "runtime_of", "snapshots_of", "viewer",
]
