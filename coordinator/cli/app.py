"""``fleetgate``: the operator's command line (typer).

    fleetgate pause --reason TEXT [--hold NAME] [--at TIME|2h] [--by NAME] [--for 30m]
                    [--auto-resume] [--wait] [--timeout 60s]
    fleetgate resume [--hold NAME | --all] [--reason TEXT] [--by NAME] [--stagger 30s] [--wait]
                     [--timeout 60s]
    fleetgate status [--watch]
    fleetgate history [--limit N]
    fleetgate fleets [--limit N]
    fleetgate pause|resume --fleet A --fleet B ... | --all-fleets [--yes]   (one change per fleet)
    fleetgate enqueue ITEM... | --count N | --file PATH
    fleetgate schedule add NAME --cron EXPR --duration 2h --timezone ZONE --reason TEXT
                       [--starting DATE] [--until DATE] [--skip DATE ...]
    fleetgate schedule list | remove NAME
    fleetgate serve [--host 127.0.0.1] [--port 8080] [--insecure-no-auth]
    fleetgate demo

Global options ``--redis-url`` and ``--fleet`` (``FLEETGATE_REDIS_URL``, ``FLEETGATE_FLEET``);
every command takes ``--json`` (the shapes are in ``coordinator.render``).

Exit status (``coordinator.cli.exits``): 0 ok; 1 Redis cannot be reached (or an unexpected
error); 2 bad usage or configuration (also: a resume naming no hold while there are
several, or a hold there is not; a Redis URL that cannot work, its parameters and TLS files
checked before connecting; a Redis whose answer says it never will as it is: a password it
requires, TLS on one side only, a Sentinel where a server is expected, no Lua scripting); 3 a ``--wait`` that timed out (the stragglers named on
stderr); 5 a change whose outcome is unknown (sent, never answered: read the state). Every
failure is one line on stderr, never a traceback.

The commands live by what they do: ``change`` (pause, resume), ``read`` (status, history),
``enqueue``, ``serve`` (serve, demo); this module is the app and its entry point.

Start-up: typer reads every command's signature to build the command line, so the command
modules import typer and the option checks only; each command loads the library, Redis,
pydantic and rich when it runs (``fleetgate --help`` loads none of them, ``tests/test_layers.py``
holds it to that). A command line that starts with its command is run by an app of that
command alone (``build_app``): ``fleetgate status`` neither loads nor builds the others.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Final, cast

import typer

from coordinator.cli.coercion import LeanCommand, LeanGroup
from coordinator.cli.exits import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    CliError,
)
from coordinator.cli.options import Globals
from coordinator.cli.output import fail, plain

if TYPE_CHECKING:
    from replica.process.shutdown import Interrupted

COMMANDS: Final = {
    "pause": "change", "resume": "change", "status": "read", "history": "read",
    "fleets": "fleets", "enqueue": "enqueue", "serve": "serve", "demo": "serve",
}
"""Each command and the module of ``coordinator.cli`` that holds it (a function of its name)."""
GROUPS: Final = ("schedule", "limits")
"""The command groups: each a module of ``coordinator.cli`` with its own typer ``app``."""


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
    # Before any command runs (not for --help, which needs no logging): the command reports
    # outcomes itself; library warnings would break its one-line promise.
    import logging

    logging.basicConfig(level=logging.ERROR, format="fleetgate: %(levelname)s %(name)s: %(message)s")
    ctx.obj = Globals(redis_url=redis_url, fleet=fleet)


def build_app(only: str | None = None) -> typer.Typer:
    """The typer app: every command, or only the command (or group) ``only``.

    Typer builds the command line from every registered command's signature (their type
    hints evaluated, each option made) before it runs one: a command line that names its
    command first (``fleetgate status ...``) is run by an app of that command alone, its
    module the only one loaded. Its options, help, usage errors and exit statuses are the
    same; anything else (``--help``, a global option first, an unknown command) gets the
    whole app."""
    app = typer.Typer(
        name="fleetgate",
        cls=LeanGroup,  # option values coerced without pydantic where typer's answer is plain
        help="Pause and resume a fleet of asyncio workers through Redis.",
        add_completion=False,
        no_args_is_help=True,
        rich_markup_mode=None,
        pretty_exceptions_enable=False,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    app.callback()(_options)
    for name in (*COMMANDS, *GROUPS) if only is None else (only,):
        module = importlib.import_module(f"coordinator.cli.{COMMANDS.get(name, name)}")
        if name in GROUPS:
            app.add_typer(module.app, name=name)
        else:
            app.command(cls=LeanCommand)(getattr(module, name))
    return app


def __getattr__(name: str) -> typer.Typer:
    if name == "app":  # the whole app, as typer's tools and the tests read it
        return build_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main(argv: Sequence[str] | None = None) -> int:
    """The ``fleetgate`` console script. Returns the exit status (never raises); when a signal
    stopped the command, the process ends here (``exit_now``): the interpreter's teardown can
    take a second on a loaded machine, past the bound a signal promises."""
    status = _main(argv)
    # Only a command that ran Redis work loaded the shutdown machinery (``--help`` does not):
    # without it, no signal stopped a command.
    shutdown = sys.modules.get("replica.process.shutdown")
    if shutdown is not None and shutdown.signalled():
        shutdown.exit_now(status)
    return status


def _main(argv: Sequence[str] | None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    only = args[0] if args and (args[0] in COMMANDS or args[0] in GROUPS) else None
    try:
        rv = build_app(only)(args=args, prog_name="fleetgate", standalone_mode=False)
    except CliError as exc:
        return fail(str(exc), exc.code)
    except typer.TyperException as exc:  # typer's (vendored click) usage errors
        if type(exc).__name__ == "NoArgsIsHelpError":
            sys.stdout.write(exc.format_message() + "\n")
            return EXIT_OK
        ctx = getattr(exc, "ctx", None)
        where = getattr(ctx, "command_path", None) or "fleetgate"
        hint = f" (see '{where} --help')" if exc.exit_code == EXIT_USAGE else ""
        return fail(plain(exc.format_message()) + hint, exc.exit_code)
    except typer.Abort:
        return fail("aborted", EXIT_INTERRUPTED)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as exc:  # the promise: one line, never a traceback
        interrupted = _interrupted(exc)
        if interrupted is not None:  # SIGINT or SIGTERM while the command ran (130 or 143)
            return fail(f"interrupted by {interrupted.signal.name}", interrupted.status)
        return fail(f"unexpected error: {type(exc).__name__}: {plain(str(exc))}", EXIT_UNREACHABLE)
    return rv if isinstance(rv, int) else EXIT_OK


def _interrupted(exc: Exception) -> Interrupted | None:
    """``exc`` when it is ``replica.process.shutdown.Interrupted`` (raised only once that module
    is loaded: it is not imported for a command that never needed it)."""
    shutdown = sys.modules.get("replica.process.shutdown")
    if shutdown is not None and isinstance(exc, shutdown.Interrupted):
        return cast("Interrupted", exc)
    return None


if __name__ == "__main__":
    raise SystemExit(main())
