"""``fleetgate``: the operator's command line (typer).

    fleetgate pause --reason TEXT [--by NAME] [--for 30m] [--auto-resume] [--wait] [--timeout 60s]
    fleetgate resume [--reason TEXT] [--by NAME] [--stagger 30s] [--wait] [--timeout 60s]
    fleetgate status [--watch]
    fleetgate history [--limit N]
    fleetgate enqueue ITEM... | --count N | --file PATH
    fleetgate serve [--host 127.0.0.1] [--port 8080] [--insecure-no-auth]
    fleetgate demo

Global options ``--redis-url`` and ``--fleet`` (``FLEETGATE_REDIS_URL``, ``FLEETGATE_FLEET``);
every command takes ``--json`` (the shapes are in ``coordinator.render``).

Exit status: 0 ok; 1 Redis cannot be reached (or an unexpected error); 2 bad usage or
configuration; 3 a ``--wait`` that timed out (the stragglers named on stderr). Every failure is
one line on stderr, never a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import json
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Final, TextIO, TypeVar

import typer
from pydantic import ValidationError
from redis.asyncio import Redis
from redis.exceptions import RedisError
from rich.console import Console

from coordinator import render
from coordinator.durations import InvalidDuration, parse_duration
from coordinator.fleet.fleet import Fleet
from coordinator.fleet.models import AuditEvent, ReplicaInfo, WaitReport
from coordinator.settings import CoordinatorSettings, check_reason, redact
from replica.contract import MAX_STAGGER_S, FleetState
from replica.errors import ConfigError, ContractError

log = logging.getLogger(__name__)

EXIT_OK: Final = 0
EXIT_UNREACHABLE: Final = 1
EXIT_USAGE: Final = 2
EXIT_TIMEOUT: Final = 3
MAX_COUNT: Final = 1_000_000
ENQUEUE_BATCH: Final = 1000

T = TypeVar("T")


class CliError(Exception):
    """A failure the CLI reports as one line on stderr with its exit status."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def usage(message: str) -> CliError:
    return CliError(message, EXIT_USAGE)


app = typer.Typer(
    name="fleetgate",
    help="Pause and resume a fleet of asyncio workers through Redis.",
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@dataclass
class Globals:
    redis_url: str | None
    fleet: str | None

    def settings(self, **overrides: Any) -> CoordinatorSettings:
        """The settings: environment, then the global options, then the command's own."""
        values: dict[str, Any] = {}
        if self.redis_url is not None:
            values["redis_url"] = self.redis_url
        if self.fleet is not None:
            values["fleet"] = self.fleet
        values.update({k: v for k, v in overrides.items() if v is not None})
        try:
            return CoordinatorSettings(**values)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ())) or "settings"
            raise usage(f"invalid {where}: {_plain(first.get('msg', 'invalid')).removeprefix('Value error, ')}") from None


JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON (a stable, documented shape).")]
# The global options are accepted after the command too (without the environment: the global
# option reads it, and the command's own must not override an explicit global one with it).
UrlOption = Annotated[str | None, typer.Option("--redis-url", help="Redis URL (as the global option).")]
FleetOption = Annotated[str | None, typer.Option("--fleet", help="Fleet name (as the global option).")]


@app.callback()
def _options(
    ctx: typer.Context,
    redis_url: Annotated[
        str | None,
        typer.Option("--redis-url", envvar="FLEETGATE_REDIS_URL", help="Redis URL."),
    ] = None,
    fleet: Annotated[
        str | None,
        typer.Option("--fleet", envvar="FLEETGATE_FLEET", help="Fleet name."),
    ] = None,
) -> None:
    """Pause and resume a fleet of asyncio workers through Redis."""
    ctx.obj = Globals(redis_url=redis_url, fleet=fleet)


# ---------------------------------------------------------------------------- helpers


def _plain(message: str) -> str:
    return " ".join(str(message).split())


def _console() -> Console:
    return Console(width=None if sys.stdout.isatty() else 200, soft_wrap=False)


def _emit_json(data: Any, *, compact: bool = False) -> None:
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":")) if compact else json.dumps(
        data, indent=2, ensure_ascii=False
    )
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _reason(value: str) -> str:
    """A checked --reason, or a usage error (one line, exit 2)."""
    try:
        return check_reason(value)
    except ValueError as exc:
        raise usage(str(exc)) from None


def _duration(value: str | None, option: str, maximum: float | None = None) -> float | None:
    if value is None:
        return None
    try:
        if maximum is None:
            return parse_duration(value, name=option)
        return parse_duration(value, name=option, maximum=maximum)
    except InvalidDuration as exc:
        raise usage(str(exc)) from None


def _operator(by: str | None) -> str:
    if by is not None:
        name = by.strip()
        if not name or len(name) > 100 or not name.isprintable():
            raise usage("--by must be 1 to 100 printable characters")
        return name
    try:
        return getpass.getuser()
    except (KeyError, OSError, ImportError):
        return f"uid-{os.getuid()}"


def run_with_fleet(settings: CoordinatorSettings, action: Callable[[Fleet], Awaitable[T]]) -> T:
    """Run ``action(fleet)`` on a fresh client; Redis errors become exit status 1."""

    async def go() -> T:
        try:
            redis = Redis.from_url(
                settings.redis_url, decode_responses=True, socket_connect_timeout=5, socket_timeout=30
            )
        except ValueError as exc:
            raise usage(f"invalid --redis-url {redact(settings.redis_url)}: {_plain(str(exc))}") from None
        try:
            return await action(Fleet(redis, settings.fleet))
        finally:
            await asyncio.shield(redis.aclose())

    try:
        return asyncio.run(go())
    except (RedisError, OSError, TimeoutError) as exc:
        raise CliError(
            f"cannot reach Redis at {redact(settings.redis_url)}: {_plain(str(exc)) or type(exc).__name__}",
            EXIT_UNREACHABLE,
        ) from None
    except ContractError as exc:
        raise usage(str(exc)) from None


# ---------------------------------------------------------------------------- pause / resume


@app.command()
def pause(
    ctx: typer.Context,
    reason: Annotated[str, typer.Option("--reason", "-r", help="Why (1 to 500 printable characters).")],
    by: Annotated[str | None, typer.Option("--by", help="Who (default: the OS user).")] = None,
    for_: Annotated[
        str | None, typer.Option("--for", help="Expected window, e.g. 30m; overdue after it.")
    ] = None,
    auto_resume: Annotated[
        bool, typer.Option("--auto-resume", help="Resume by itself when the --for window ends.")
    ] = False,
    wait: Annotated[bool, typer.Option("--wait", help="Block until every live replica is quiet.")] = False,
    timeout: Annotated[str, typer.Option("--timeout", help="How long --wait waits.")] = "60s",
    json_out: JsonOption = False,
    redis_url: UrlOption = None,
    fleet: FleetOption = None,
) -> None:
    """Pause the fleet: every replica finishes the item in hand and takes no more."""
    g: Globals = ctx.obj
    reason = _reason(reason)
    window = _duration(for_, "--for")
    if auto_resume and window is None:
        raise usage("--auto-resume needs --for (the window after which the fleet resumes)")
    wait_s = _duration(timeout, "--timeout")
    operator = _operator(by)
    settings = g.settings(redis_url=redis_url, fleet=fleet)

    span = None if window is None else timedelta(seconds=window)

    async def act(fleet: Fleet) -> tuple[FleetState, WaitReport | None]:
        state = await fleet.pause(
            reason, by=operator, expected_for=span, auto_resume_after=span if auto_resume else None
        )
        report = await fleet.wait(state.version, timeout=wait_s or 60.0) if wait else None
        return state, report

    state, report = run_with_fleet(settings, act)
    _report_action(state, report, json_out)


@app.command()
def resume(
    ctx: typer.Context,
    reason: Annotated[
        str | None, typer.Option("--reason", "-r", help="Why, for the audit trail (optional).")
    ] = None,
    by: Annotated[str | None, typer.Option("--by", help="Who (default: the OS user).")] = None,
    stagger: Annotated[
        str | None, typer.Option("--stagger", help="Spread the replicas' resumes over this window.")
    ] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Block until every live replica runs.")] = False,
    timeout: Annotated[str, typer.Option("--timeout", help="How long --wait waits.")] = "60s",
    json_out: JsonOption = False,
    redis_url: UrlOption = None,
    fleet: FleetOption = None,
) -> None:
    """Resume the fleet: replicas continue with the queue untouched."""
    g: Globals = ctx.obj
    if reason is not None:
        reason = _reason(reason)
    stagger_s = _duration(stagger, "--stagger", maximum=MAX_STAGGER_S)
    wait_s = _duration(timeout, "--timeout")
    operator = _operator(by)
    settings = g.settings(redis_url=redis_url, fleet=fleet)

    spread = None if stagger_s is None else timedelta(seconds=stagger_s)

    async def act(fleet: Fleet) -> tuple[FleetState, WaitReport | None, bool]:
        was_paused = (await fleet.state()).paused
        state = await fleet.resume(by=operator, stagger=spread, reason=reason or "")
        report = await fleet.wait(state.version, timeout=wait_s or 60.0) if wait else None
        return state, report, was_paused

    state, report, was_paused = run_with_fleet(settings, act)
    _report_action(state, report, json_out, changed=was_paused)


def _report_action(
    state: FleetState, report: WaitReport | None, json_out: bool, changed: bool = True
) -> None:
    if json_out:
        _emit_json(render.action_dict(state, report))
    else:
        console = _console()
        line = render.action_line(state) if changed else (
            f"fleet {state.fleet} is not paused (version {state.version}): nothing to resume"
        )
        console.print(line, highlight=False, markup=False)
        if report is not None:
            console.print(render.wait_table(report))
    if report is not None and not report.ok:
        raise CliError(render.stragglers_line(report), EXIT_TIMEOUT)


# ---------------------------------------------------------------------------- status / history


@app.command()
def status(
    ctx: typer.Context,
    watch: Annotated[bool, typer.Option("--watch", "-w", help="Refresh every second until Ctrl-C.")] = False,
    interval: Annotated[
        float, typer.Option("--interval", min=0.1, max=3600, help="Seconds between --watch refreshes.")
    ] = 1.0,
    json_out: JsonOption = False,
    redis_url: UrlOption = None,
    fleet: FleetOption = None,
) -> None:
    """The fleet's state and every replica: paused or running, reason, by, since, age."""
    g: Globals = ctx.obj
    settings = g.settings(redis_url=redis_url, fleet=fleet)

    async def read(fleet: Fleet) -> tuple[FleetState, list[ReplicaInfo]]:
        return await fleet.state(), await fleet.replicas()

    if not watch:
        state, replicas = run_with_fleet(settings, read)
        if json_out:
            _emit_json(render.status_dict(state, replicas, max_pause=settings.max_pause))
        else:
            _console().print(render.status_renderable(state, replicas, max_pause=settings.max_pause))
        return

    async def watch_loop(fleet: Fleet) -> None:
        from rich.live import Live

        if json_out:
            while True:
                state, replicas = await read(fleet)
                _emit_json(render.status_dict(state, replicas, max_pause=settings.max_pause), compact=True)
                await asyncio.sleep(interval)
        console = _console()
        with Live(console=console, auto_refresh=False, screen=False) as live:
            while True:
                state, replicas = await read(fleet)
                live.update(render.status_renderable(state, replicas, max_pause=settings.max_pause))
                live.refresh()
                await asyncio.sleep(interval)

    with contextlib.suppress(KeyboardInterrupt):
        run_with_fleet(settings, watch_loop)


@app.command()
def history(
    ctx: typer.Context,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, max=1000, help="How many events.")] = 20,
    json_out: JsonOption = False,
    redis_url: UrlOption = None,
    fleet: FleetOption = None,
) -> None:
    """The audit trail: every pause, resume and restore, newest first."""
    g: Globals = ctx.obj
    settings = g.settings(redis_url=redis_url, fleet=fleet)

    async def read(fleet: Fleet) -> list[AuditEvent]:
        return await fleet.history(limit=limit)

    events = run_with_fleet(settings, read)
    if json_out:
        _emit_json(render.history_dict(settings.fleet, events))
    else:
        _console().print(render.history_table(events))


# ---------------------------------------------------------------------------- enqueue


def _item(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _read_lines(stream: TextIO, name: str) -> Iterator[Any]:
    for number, line in enumerate(stream, start=1):
        if not line.strip():
            continue
        try:
            yield json.loads(line)
        except ValueError as exc:
            raise usage(f"{name} line {number}: not JSON: {_plain(str(exc))}") from None


@app.command()
def enqueue(
    ctx: typer.Context,
    items: Annotated[
        list[str] | None, typer.Argument(help="Items: JSON if they parse as JSON, else strings.")
    ] = None,
    count: Annotated[
        int | None, typer.Option("--count", min=1, max=MAX_COUNT, help='N synthetic items {"id", "n"}.')
    ] = None,
    file: Annotated[
        str | None, typer.Option("--file", help="One JSON item per line ('-' for stdin).")
    ] = None,
    json_out: JsonOption = False,
    redis_url: UrlOption = None,
    fleet: FleetOption = None,
) -> None:
    """Add work items to the fleet's work stream."""
    g: Globals = ctx.obj
    sources = sum(1 for s in (items, count, file) if s)
    if sources != 1:
        raise usage("give items as arguments, or --count N, or --file PATH (exactly one of them)")
    payload: list[Any]
    if items:
        payload = [_item(i) for i in items]
    elif count:
        payload = [{"id": f"item-{n:06d}", "n": n} for n in range(1, count + 1)]
    else:
        assert file is not None
        if file == "-":
            payload = list(_read_lines(sys.stdin, "stdin"))
        else:
            try:
                with Path(file).open(encoding="utf-8") as stream:
                    payload = list(_read_lines(stream, file))
            except (OSError, UnicodeDecodeError) as exc:
                raise usage(f"cannot read {file}: {_plain(str(exc))}") from None
    settings = g.settings(redis_url=redis_url, fleet=fleet)

    async def put(fleet: Fleet) -> list[str]:
        ids: list[str] = []
        for start in range(0, len(payload), ENQUEUE_BATCH):
            ids.extend(await fleet.enqueue(payload[start : start + ENQUEUE_BATCH]))
        return ids

    try:
        ids = run_with_fleet(settings, put) if payload else []
    except (TypeError, ValueError) as exc:  # an item JSON cannot encode
        raise usage(f"cannot enqueue: {_plain(str(exc))}") from None
    if json_out:
        _emit_json({"fleet": settings.fleet, "count": len(ids), "ids": ids})
    else:
        first_last = f" ({ids[0]} .. {ids[-1]})" if ids else ""
        print(f"enqueued {len(ids)} items on fleet {settings.fleet}{first_last}")


# ---------------------------------------------------------------------------- serve / demo


@app.command()
def serve(
    ctx: typer.Context,
    host: Annotated[str | None, typer.Option("--host", help="Listen address [env FLEETGATE_HOST, default 127.0.0.1].")] = None,
    port: Annotated[
        int | None, typer.Option("--port", min=0, max=65535, help="Port [env FLEETGATE_PORT, default 8080].")
    ] = None,
    insecure_no_auth: Annotated[
        bool, typer.Option("--insecure-no-auth", help="Serve without tokens (everyone is 'anonymous').")
    ] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Log JSON lines.")] = False,
    redis_url: UrlOption = None,
    fleet: FleetOption = None,
) -> None:
    """Serve the HTTP API, the dashboard and /metrics, and watch for forgotten pauses."""
    from coordinator.web.server import serve_forever

    g: Globals = ctx.obj
    settings = g.settings(redis_url=redis_url, fleet=fleet, host=host, port=port)
    try:
        started = serve_forever(settings, insecure_no_auth=insecure_no_auth, json_logs=json_out)
    except ConfigError as exc:
        raise usage(str(exc)) from None
    if not started:
        raise CliError(f"could not serve on {settings.host}:{settings.port}", EXIT_UNREACHABLE)


@app.command()
def demo(
    serve: Annotated[
        bool, typer.Option("--serve", help="Keep the fleet and the dashboard running until Ctrl-C.")
    ] = False,
    pool_only: Annotated[
        bool, typer.Option("--pool", help="Run the single-pool scenario instead (no Redis).")
    ] = False,
    json_out: JsonOption = False,
) -> None:
    """Run a real fleet (3 replicas, Redis, the API), pause it mid-run, resume, and print what
    it measured (exit 0 when every check held, 1 otherwise)."""
    if pool_only:
        from coordinator.demo import pooldemo

        if json_out:
            import dataclasses

            result = asyncio.run(pooldemo.run_pool_demo())
            _emit_json({**dataclasses.asdict(result), "ok": result.ok})
            code = 0 if result.ok else 1
        else:
            code = pooldemo.main()
    else:
        from coordinator.demo import run as fleet_demo

        code = fleet_demo.main(serve=serve, json_out=json_out)
    if code:
        raise typer.Exit(code)


# ---------------------------------------------------------------------------- entry point


def main(argv: Sequence[str] | None = None) -> int:
    """The ``fleetgate`` console script. Returns the exit status (never raises)."""
    # The command reports outcomes itself; library warnings would break its one-line promise.
    logging.basicConfig(level=logging.ERROR, format="fleetgate: %(levelname)s %(name)s: %(message)s")
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        rv = app(args=args, prog_name="fleetgate", standalone_mode=False)
    except CliError as exc:
        return _fail(str(exc), exc.code)
    except typer.TyperException as exc:  # typer's (vendored click) usage errors
        if type(exc).__name__ == "NoArgsIsHelpError":
            sys.stdout.write(exc.format_message() + "\n")
            return EXIT_OK
        ctx = getattr(exc, "ctx", None)
        where = getattr(ctx, "command_path", None) or "fleetgate"
        hint = f" (see '{where} --help')" if exc.exit_code == EXIT_USAGE else ""
        return _fail(_plain(exc.format_message()) + hint, exc.exit_code)
    except typer.Abort:
        return _fail("aborted", 130)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # the promise: one line, never a traceback
        return _fail(f"unexpected error: {type(exc).__name__}: {_plain(str(exc))}", EXIT_UNREACHABLE)
    return rv if isinstance(rv, int) else EXIT_OK


def _fail(message: str, code: int) -> int:
    sys.stdout.flush()
    sys.stderr.write(f"fleetgate: {message}\n")
    sys.stderr.flush()
    return code


if __name__ == "__main__":
    raise SystemExit(main())
