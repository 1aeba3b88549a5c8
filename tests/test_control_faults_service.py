"""A replica service whose controller meets a fault (issue 19, A.2): not ready while held,
with the reason; the fault metric says it; alive until the fault outlasts its bound; all back
once the loop recovers."""

from __future__ import annotations

from typing import Any

import httpx
import redis.asyncio as aioredis
from cpkit import publish_state, state_at, until

from replica.service.handlers import LoadedHandler
from replica.service.service import ReplicaService
from replica.service.settings import ReplicaSettings


async def _handler(item: Any) -> None:
    return None


async def test_a_service_whose_sync_loop_fails_is_unready_with_why_and_not_alive_only_past_the_bound(
    redis_url: str, redis: aioredis.Redis, fleet_name: str
) -> None:
    await publish_state(redis, state_at(fleet_name, 1, False))
    settings = ReplicaSettings(redis_url=redis_url, fleet=fleet_name, replica_id="svc-fault",
                               port=0, admin_token="t", poll_interval=0.1,
                               heartbeat_interval=0.3, fault_fatal_after=120)
    service = ReplicaService(settings, LoadedHandler(ref="tests:_handler", func=_handler))
    await service.start()
    try:
        controller = service.controller
        assert controller.settings.fault_fatal_after == 120  # FLEETGATE_FAULT_FATAL_AFTER
        link = controller._link
        call = link.call
        broken_now = True

        async def broken(commands: list[tuple[Any, ...]], quiet: Any = ()) -> list[Any]:
            if broken_now:
                raise UnicodeDecodeError("utf-8", b"\xe6\x95", 0, 2, "injected")
            return await call(commands, quiet)

        link.call = broken  # type: ignore[method-assign]
        base = f"http://127.0.0.1:{service.port}"
        async with httpx.AsyncClient(base_url=base, timeout=5) as http:

            async def unready() -> bool:
                return (await http.get("/readyz")).status_code == 503

            await until(unready, what="/readyz 503")
            body = (await http.get("/readyz")).json()
            assert body["reason"].startswith(
                "control-plane: control loop sync failed: UnicodeDecodeError"), body
            assert "fleetgate_control_fault 1.0" in (await http.get("/metrics")).text
            assert (await http.get("/healthz")).status_code == 200  # held, still alive

            controller._faults.fatal_after = 0.2  # the bound (300 s by default) passes

            async def dead() -> bool:
                return (await http.get("/healthz")).status_code == 503

            await until(dead, what="/healthz 503")
            reason = (await http.get("/healthz")).json()["reason"]
            assert reason.startswith("control loop sync has failed for"), reason

            broken_now = False

            async def ready() -> bool:
                return (await http.get("/readyz")).status_code == 200

            await until(ready, what="/readyz 200 again")
            assert (await http.get("/healthz")).status_code == 200
            assert "fleetgate_control_fault 0.0" in (await http.get("/metrics")).text
    finally:
        await service.stop()
