"""``GET /api/fleets/{name}/scaling`` (issue 21, point 2), read the way KEDA's ``metrics-api``
scaler reads it: a ``fleetgate serve`` process on a port, an HTTP GET with
``Authorization: Bearer <view token>`` (``authMode: bearer``), the value picked from the JSON
body at ``valueLocation`` (KEDA uses gjson: for a top-level key, the key's name) and required to
be a number. A real replica process consumes the fleet's work stream meanwhile."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from coordinator.demo.localredis import LocalRedis, free_port
from coordinator.fleet.fleet import Fleet
from coordinator.fleet.snapshots import Snapshots
from coordinator.web.fleetview import scaling_view
from replica.contract import WORK_GROUP, Keys
from tests.fleetkit import until
from tests.procs import Processes, base_env, enqueue, replica_processes
from tests.test_backlog import client_fixture, two_pending  # noqa: F401 (the client fixture)

pytestmark = pytest.mark.slow

ADMIN = "scaling-admin-token-0123456"
KEDA = "keda-view-token-0123456789"
OTHER = "other-view-token-012345678"
VALUE_LOCATION = "schedulable_backlog"


def keda_value(body: bytes, location: str) -> float:
    """What KEDA's metrics-api scaler (format json) takes from ``body``: the gjson path's value,
    which must be a number (a string must be a Kubernetes quantity: never one here)."""
    value: Any = json.loads(body)
    for part in location.split("."):  # a gjson path of plain keys
        if not isinstance(value, dict) or part not in value:
            raise AssertionError(f"valueLocation {location!r} not found")
        value = value[part]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise AssertionError(f"valueLocation {location!r} must point to a number, got {value!r}")
    return float(value)


async def serve(processes: Processes, url: str, fleet: str, tmp_path: Path) -> str:
    """``fleetgate serve`` with a view token for KEDA limited to ``fleet``; its base URL once
    it answers /healthz."""
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps([
        {"name": "keda", "token": KEDA, "role": "view", "fleets": [fleet]},
        {"name": "other-dash", "token": OTHER, "role": "view", "fleets": ["someone-else"]},
    ]))
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETGATE_")}
    env.update({"FLEETGATE_REDIS_URL": url, "FLEETGATE_ADMIN_TOKEN": ADMIN,
                "FLEETGATE_TOKENS_FILE": str(tokens), "FLEETGATE_FLEET": fleet})
    log = tmp_path / "serve.log"
    with log.open("w") as err:
        proc = processes.start(
            [sys.executable, "-m", "coordinator", "serve", "--port", str(port)],
            env=env, stdout=subprocess.DEVNULL, stderr=err,
        )
    base = f"http://127.0.0.1:{port}"
    async with httpx.AsyncClient(timeout=2) as http, asyncio.timeout(30):
        while True:
            assert proc.poll() is None, log.read_text()
            try:
                if (await http.get(base + "/healthz")).status_code == 200:
                    return base
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.1)  # another process's port: no event to wait on


async def test_keda_reads_the_backlog_while_the_fleet_runs_and_zero_while_it_is_held(
    private_redis: LocalRedis, client: aioredis.Redis, fleet_name: str, tmp_path: Path,
    processes: Processes,
) -> None:
    await enqueue(client, fleet_name, 12)
    env = base_env(private_redis.url, fleet_name, workers=2, queue_size=2, demo_item_seconds=120)
    async with replica_processes(1, env, tmp_path):
        await until(lambda: two_pending(client, fleet_name), 30)
        base = await serve(processes, private_redis.url, fleet_name, tmp_path)
        route = f"{base}/api/fleets/{fleet_name}/scaling"
        keda = {"Authorization": f"Bearer {KEDA}"}
        async with httpx.AsyncClient(timeout=10) as http:
            running = await http.get(route, headers=keda)
            assert running.status_code == 200, running.text
            assert keda_value(running.content, VALUE_LOCATION) == 10
            body = running.json()
            assert (body["fleet"], body["backlog"], body["pending"], body["paused"],
                    body["holds"]) == (fleet_name, 10, 2, False, [])

            paused = await http.post(
                f"{base}/api/fleets/{fleet_name}/pause",
                headers={"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"},
                json={"reason": "db maintenance", "hold": "db"})
            assert paused.status_code == 200, paused.text
            await enqueue(client, fleet_name, 5)  # producers go on while it is held
            held = await http.get(route, headers=keda)  # at once: no refresh interval to wait
            assert held.status_code == 200, held.text
            assert keda_value(held.content, VALUE_LOCATION) == 0
            body = held.json()
            assert body["paused"] is True and body["backlog"] >= 10
            assert [(h["name"], h["reason"]) for h in body["holds"]] == [("db", "db maintenance")]

            resumed = await http.post(
                f"{base}/api/fleets/{fleet_name}/resume",
                headers={"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"},
                json={"hold": "db"})
            assert resumed.status_code == 200, resumed.text
            again = (await http.get(route, headers=keda)).json()
            assert again["paused"] is False
            assert again["schedulable_backlog"] == again["backlog"]

            # the token is scoped: another fleet's view token, none, or a fleet never seen
            assert (await http.get(route, headers={"Authorization": f"Bearer {OTHER}"})
                    ).status_code == 403
            assert (await http.get(route)).status_code == 401
            unknown = await http.get(f"{base}/api/fleets/never-seen-fleet/scaling",
                                     headers={"Authorization": f"Bearer {ADMIN}"})
            assert unknown.status_code == 404 and "detail" in unknown.json()


async def test_an_unknown_backlog_of_a_running_fleet_is_null_for_keda_never_a_number(
    client: aioredis.Redis, fleet_name: str
) -> None:
    keys = Keys(fleet_name)
    ids = [await client.xadd(keys.work, {"n": str(i)}) for i in range(5)]
    await client.xgroup_create(keys.work, WORK_GROUP, id="0")
    await client.xreadgroup(WORK_GROUP, "r1", {keys.work: ">"}, count=2)
    await client.xdel(keys.work, ids[3])  # Redis can no longer say the lag
    fleet = Fleet(client, fleet_name)
    running = await scaling_view(Snapshots(0.0), fleet)
    assert running["schedulable_backlog"] is None and running["backlog"] is None
    with pytest.raises(AssertionError, match="must point to a number"):
        keda_value(json.dumps(running).encode(), VALUE_LOCATION)  # KEDA: error, its fallback
    await fleet.pause("maintenance", by="t")
    held = await scaling_view(Snapshots(0.0), fleet)
    assert held["schedulable_backlog"] == 0 and held["paused"] is True
