"""The commands that run until stopped: ``serve`` (the HTTP API, the dashboard and /metrics)
and ``demo``. They import the web side and the demo only when run, so that importing the CLI
loads neither fastapi nor uvicorn (nor Redis: ``fleetgate --help`` reads these signatures)."""

from __future__ import annotations

from typing import Annotated

import typer

from coordinator.cli.exits import EXIT_UNREACHABLE, CliError, usage
from coordinator.cli.options import FleetOption, Globals, JsonOption, UrlOption
from coordinator.cli.output import emit_json


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
    g: Globals = ctx.obj
    from coordinator.cli.runner import preflight
    from replica.errors import ConfigError

    settings = g.settings(redis_url=redis_url, fleet=fleet, host=host, port=port)
    preflight(settings)  # a Redis that can never work (no Lua, a password it requires): exit 2
    from coordinator.web.server import serve_forever

    try:
        started = serve_forever(settings, insecure_no_auth=insecure_no_auth, json_logs=json_out)
    except ConfigError as exc:
        raise usage(str(exc)) from None
    if not started:
        raise CliError(f"could not serve on {settings.host}:{settings.port} (see the log above)", EXIT_UNREACHABLE)


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
        import asyncio

        from coordinator.demo import pooldemo

        if json_out:
            import dataclasses

            result = asyncio.run(pooldemo.run_pool_demo())
            emit_json({**dataclasses.asdict(result), "ok": result.ok})
            code = 0 if result.ok else 1
        else:
            code = pooldemo.main()
    else:
        from coordinator.demo import run as fleet_demo

        code = fleet_demo.main(serve=serve, json_out=json_out)
    if code:
        raise typer.Exit(code)


__all__ = ["demo", "serve"]
