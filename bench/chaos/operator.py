"""The operator: random pauses and resumes, through ``Fleet`` and through the ``fleetgate`` CLI.

One call at a time, as a person at a terminal: a pause (a reason; a fleet hold, often the
default one; sometimes an expected window, sometimes a ``--for`` window with auto-resume,
sometimes a maintenance window scheduled a few seconds ahead; sometimes ``--wait``) or a resume
(of one named hold, of all of them, or naming none, which is refused while there are several;
sometimes staggered, sometimes with a reason, sometimes ``--wait``), then a pause of
``op_every``. Each
call is an ``op`` in the history with what it asked, what it got back and when; a wait's report
is kept whole enough for the checker (``ok``, each replica's ``reached`` and ``why``) along with
the bounds of the moment it was made (``t_lo``, ``t_hi``).

``Fleet`` calls go through two coordinators, one that keeps its acknowledgements subscription
open (``Fleet.listen()``, as the API does) and one that does not (as the CLI does).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import sys
import time
from collections.abc import Awaitable
from datetime import timedelta
from pathlib import Path
from typing import Any, Final

from redis.exceptions import RedisError

from bench.chaos.history import HistoryWriter
from bench.chaos.observer import epoch, holds_fields
from bench.chaos.settings import ChaosSettings
from coordinator.fleet.durability import NotConfirmed
from coordinator.fleet.fleet import Fleet
from coordinator.fleet.models import WaitReport
from replica.contract import FleetState, now_utc, parse_time
from replica.errors import HoldConflict, OutcomeUnknown
from replica.link.connect import connect

FLEETGATE_BIN: Final = str(Path(sys.executable).with_name("fleetgate"))
HOLDS: Final = ("db", "payments", "ops")
"""Named holds the operator draws besides the default one."""
REASONS: Final = ("orders-db failover drill", "deploy 4.2", "vendor outage", "chaos: look",
                  "migration step 3", "investigating duplicates")
CLI_GRACE_S: Final = 30.0
"""How far past its --timeout a CLI call may run before the runner kills it (and says so)."""


def _wait_dict(report: WaitReport, t_lo: float, t_hi: float) -> dict[str, Any]:
    return {"ok": report.ok, "version": report.version, "action": report.action,
            "elapsed_s": report.elapsed_s, "t_lo": t_lo, "t_hi": t_hi,
            "replicas": [{"id": r.id, "reached": r.reached, "why": r.why}
                         for r in report.replicas]}


def _state_fields(state: FleetState) -> dict[str, Any]:
    return {"version": state.version, "paused": state.paused,
            "changed_at": epoch(state.changed_at or state.since),
            "auto_resume_at": epoch(state.auto_resume_at), "holds": holds_fields(state)}


class Operator:
    """Acts on the fleet of ``settings`` at ``url`` until stopped."""

    def __init__(self, settings: ChaosSettings, url: str, history: HistoryWriter) -> None:
        self.settings = settings
        self.url = url
        self.history = history
        self.rng = random.Random(f"operator:{settings.seed}")
        self.redis = connect(url, decode_responses=True, socket_timeout=5.0,
                             socket_connect_timeout=2.0)
        self.listening = Fleet(self.redis, settings.fleet)
        self.plain = Fleet(self.redis, settings.fleet)
        self.paused = False
        self.holds: list[str] = []
        """The holds the operator believes the fleet has (from the last state it read)."""
        self.calls = 0
        self.stopping = asyncio.Event()

    async def aclose(self) -> None:
        with contextlib.suppress(Exception):
            await self.listening.aclose()
        with contextlib.suppress(Exception):
            await self.redis.aclose()

    async def run(self) -> None:
        """Act until ``stopping`` is set (the call under way ends first) or cancelled (a call
        under way is cut off: its ``op`` says ``cancelled``)."""
        with contextlib.suppress(RedisError, OSError):
            await self.listening.listen()
        low, high = self.settings.op_every
        while not self.stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), self.rng.uniform(low, high))
            if not self.stopping.is_set():
                await self.act()

    async def act(self) -> None:
        rng = self.rng
        pause = rng.random() < (0.25 if self.paused else 0.8)
        via_cli = rng.random() < 0.4
        wait = rng.random() < 0.5
        timeout = round(rng.uniform(1.5, 4.0), 1)
        if pause:
            args: dict[str, Any] = {"reason": rng.choice(REASONS), "wait": wait,
                                    "timeout": timeout}
            if rng.random() < 0.4:
                args["hold"] = rng.choice(HOLDS)
            roll = rng.random()
            if roll < 0.15:
                # a maintenance window a few seconds ahead: it starts and ends on the
                # replicas' own clocks (no --wait: nothing to wait for yet)
                args["at"] = rng.randint(1, 4)
                args["for"] = args["auto_resume"] = rng.randint(1, 4)
                args["hold"] = args.get("hold") or rng.choice(HOLDS)
                args["wait"] = False
            elif roll < 0.35:
                args["for"] = args["auto_resume"] = rng.randint(1, 4)
            elif roll < 0.55:
                args["for"] = rng.randint(5, 60)
        else:
            args = {"wait": wait, "timeout": timeout}
            roll = rng.random()
            if roll < 0.45 and self.holds:
                args["hold"] = rng.choice(self.holds)
            elif roll < 0.6:
                args["all"] = True
            if rng.random() < 0.3:
                args["stagger"] = rng.randint(1, 3)
            if rng.random() < 0.3:
                args["reason"] = rng.choice(REASONS)
        action = "pause" if pause else "resume"
        self.calls += 1
        if via_cli:
            await self.cli_call(action, args)
        else:
            await self.fleet_call(action, args, rng.choice((self.listening, self.plain)))

    # ------------------------------------------------------------------ through Fleet

    async def fleet_call(self, action: str, args: dict[str, Any], fleet: Fleet,
                         final: bool = False) -> dict[str, Any]:
        t0 = time.time()
        out: dict[str, Any] = {"via": "fleet", "action": action, "args": args, "t0": t0,
                               "final": final, "listening": fleet is self.listening}
        try:
            async with asyncio.timeout(float(args.get("timeout", 5.0)) + 15.0):
                change: Awaitable[FleetState]
                if action == "pause":
                    starts = None if "at" not in args else now_utc() + timedelta(
                        seconds=args["at"])
                    change = fleet.pause(
                        args["reason"], by="chaos-operator", expected_for=args.get("for"),
                        auto_resume_after=args.get("auto_resume"), hold=args.get("hold"),
                        starts_at=starts)
                else:
                    change = fleet.resume(by="chaos-operator", stagger=args.get("stagger"),
                                          reason=args.get("reason"), hold=args.get("hold"),
                                          all=bool(args.get("all")))
                try:
                    state = await change
                    out["result"] = "ok"
                except NotConfirmed as exc:  # made on the primary; a failover may lose it
                    state = exc.state
                    out.update(result="unconfirmed", error=str(exc)[:200])
                out.update(t_change=time.time(), **_state_fields(state))
                self._believe(state)
                if args.get("wait"):
                    w0 = time.time()
                    report = await fleet.wait(state.version, timeout=float(args["timeout"]))
                    out["wait"] = _wait_dict(report, w0 + report.elapsed_s, time.time())
        except HoldConflict as exc:
            out.update(result="refused", error=str(exc)[:200])
        except OutcomeUnknown as exc:
            out.update(result="unknown", error=str(exc)[:200])
        except TimeoutError:
            out.update(result="unknown" if "version" not in out else out["result"],
                       error="the runner's bound on the call passed")
        except (RedisError, OSError) as exc:
            out.update(result="error" if "version" not in out else out["result"],
                       error=f"{type(exc).__name__}: {exc}"[:200])
        except asyncio.CancelledError:
            out.update(result="cancelled" if "version" not in out else out["result"])
            self.history.write("op", **out)
            raise
        if out["result"] not in ("ok", "unconfirmed"):
            await self._refresh_belief()
        self.history.write("op", **out)
        return out

    def _believe(self, state: FleetState) -> None:
        self.paused = state.effectively_paused()
        now = now_utc()
        self.holds = [h.name for h in state.effective_holds() if h.status(now) != "ended"]

    async def _refresh_belief(self) -> None:
        with contextlib.suppress(RedisError, OSError, TimeoutError):
            async with asyncio.timeout(3.0):
                self._believe(await self.plain.state())

    # ------------------------------------------------------------------ through the CLI

    def cli_args(self, action: str, args: dict[str, Any]) -> list[str]:
        argv = [FLEETGATE_BIN, action, "--json", "--by", "chaos-cli",
                "--timeout", f"{args['timeout']}s"]
        if args.get("reason"):
            argv += ["--reason", args["reason"]]
        if args.get("hold"):
            argv += ["--hold", args["hold"]]
        if args.get("all"):
            argv.append("--all")
        if "at" in args:
            argv += ["--at", f"{args['at']}s"]
        if "for" in args:
            argv += ["--for", f"{args['for']}s"]
        if args.get("auto_resume"):
            argv.append("--auto-resume")
        if "stagger" in args:
            argv += ["--stagger", f"{args['stagger']}s"]
        if args.get("wait"):
            argv.append("--wait")
        return argv

    async def cli_call(self, action: str, args: dict[str, Any]) -> dict[str, Any]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLEETGATE_")}
        env.update({"FLEETGATE_REDIS_URL": self.url, "FLEETGATE_FLEET": self.settings.fleet})
        t0 = time.time()
        out: dict[str, Any] = {"via": "cli", "action": action, "args": args, "t0": t0}
        proc = await asyncio.create_subprocess_exec(
            *self.cli_args(action, args), env=env, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        try:
            async with asyncio.timeout(float(args["timeout"]) + CLI_GRACE_S):
                stdout, stderr = await proc.communicate()
        except TimeoutError:
            proc.kill()
            stdout, stderr = await proc.communicate()
            out["hung"] = True
        except asyncio.CancelledError:
            proc.kill()
            await proc.communicate()
            out.update(result="cancelled", exit=proc.returncode)
            self.history.write("op", **out)
            raise
        t1 = time.time()
        out.update(exit=proc.returncode, stderr=stderr.decode(errors="replace")[-2000:],
                   result={0: "ok", 3: "ok", 4: "unconfirmed", 5: "unknown"}.get(
                       proc.returncode or 0, "error"))
        if proc.returncode == 2 and (
                (action == "resume" and "holds" in out["stderr"])
                # a window over a hold that is active now: refused without --reschedule
                # (issue 19 C.7), as Fleet.pause raises ActiveHoldConflict
                or (action == "pause" and "--reschedule" in out["stderr"])):
            out["result"] = "refused"
        self._parse_cli(out, stdout.decode(errors="replace"), t1)
        if out["result"] not in ("ok", "unconfirmed"):
            await self._refresh_belief()
        self.history.write("op", t=t1, **out)
        return out

    def _parse_cli(self, out: dict[str, Any], stdout: str, t1: float) -> None:
        try:
            data = json.loads(stdout)
        except ValueError:
            return
        if not isinstance(data, dict) or not isinstance(data.get("state"), dict):
            return
        state = data["state"]
        changed = parse_time(state.get("changed_at") or state.get("since") or "")
        out.update(version=state.get("version"), paused=state.get("paused"),
                   changed_at=epoch(changed),
                   auto_resume_at=epoch(parse_time(state.get("auto_resume_at") or "")))
        holds = state.get("holds")
        if isinstance(holds, dict):
            out["holds"] = [[name, epoch(parse_time((h or {}).get("starts_at") or "")),
                             epoch(parse_time((h or {}).get("auto_resume_at") or ""))]
                            for name, h in sorted(holds.items())]
            self.holds = sorted(holds)
        self.paused = bool(state.get("paused"))
        wait = data.get("wait")
        if isinstance(wait, dict) and changed is not None:
            elapsed = float(wait.get("elapsed_s") or 0.0)
            out["wait"] = {
                "ok": wait.get("ok"), "version": wait.get("version"),
                "action": wait.get("action"), "elapsed_s": elapsed,
                "t_lo": changed.timestamp() + elapsed, "t_hi": t1,
                "replicas": [{"id": r.get("id"), "reached": r.get("reached"),
                              "why": r.get("why")} for r in wait.get("replicas") or []],
            }

    # ------------------------------------------------------------------ the end

    async def final_resume(self, timeout: float = 30.0) -> dict[str, Any]:
        """The last operator action of a run: a resume, waited for."""
        return await self.fleet_call("resume", {"wait": True, "timeout": timeout, "all": True,
                                                "reason": "chaos: the end"},
                                     self.plain, final=True)


__all__ = ["Operator"]
