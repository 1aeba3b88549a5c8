"""Generate the configuration page (docs/configuration.md) from the settings classes, so it cannot drift.

    python scripts/gen_config_docs.py           # print the section
    python scripts/gen_config_docs.py --write   # replace it in docs/configuration.md
    python scripts/gen_config_docs.py --check   # exit 1 when docs/configuration.md differs

The section is everything between ``<!-- section:config -->`` and ``<!-- /section:config -->``.
tests/test_config_docs.py fails when the page and this generator disagree.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pydantic_settings import BaseSettings

from replica.service.settings import BreakerSettings, ReplicaSettings, settings_table

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "configuration.md"
BEGIN = "<!-- section:config -->"
END = "<!-- /section:config -->"

INTRO = """\
Every setting is an environment variable. `fleetgate-replica` also takes each of its own as a
flag (`FLEETGATE_WORKERS` is `--workers`; a flag wins over the environment). Durations are in
seconds. A value that cannot work (a bad URL, an unknown handler, no admin token, a port in use)
stops the process at once with one line on stderr and exit status 2.
`fleetgate-replica --config-docs` prints the tables below."""

URLS = """\
## Redis URLs

`FLEETGATE_REDIS_URL` (and `--redis-url`) takes the same forms for the replica, the CLI,
`fleetgate serve` and the demo, which all open Redis through one factory
(`replica.link.connect`):

| Form | Meaning |
| --- | --- |
| `redis://[user:password@]host:port[/DB]`, `rediss://...`, `unix:///path/redis.sock` | One server (`rediss://`: TLS). |
| `redis+sentinel://[user:password@]host:port[,host:port...]/SERVICE[/DB]` | Sentinel: the master of SERVICE, found through the sentinels (again after a failover); `rediss+sentinel://` for TLS to both the sentinels and Redis. |
| `redis+cluster://[user:password@]host:port[,host:port...]` | Redis Cluster, the hosts its seeds; `rediss+cluster://` for TLS. A fleet lives in one slot: its connections follow that slot's primary. |

Every form's query parameters are checked before anything connects. Every form takes
`socket_timeout` and `socket_connect_timeout` (seconds); every TLS form (`rediss://`,
`rediss+sentinel://`, `rediss+cluster://`) takes the same TLS parameters: `ssl_ca_certs`,
`ssl_certfile`, `ssl_keyfile` (files, read at start: a missing or unreadable one is named with
its path), `ssl_cert_reqs` (`none`, `optional`, `required`) and `ssl_check_hostname`
(`true`/`false`: `false` keeps the CA check, e.g. for sentinels that announce IP addresses while
the certificates name DNS hosts). `redis://`, `rediss://` and `unix://` also take `db`,
`username`, `password`, `client_name`, `protocol` (2 or 3), `socket_keepalive`,
`retry_on_timeout`, `health_check_interval` and `max_connections`; Sentinel takes
`sentinel_username` and `sentinel_password` (the sentinels' own credentials). Anything else, a
parameter given twice or a value of the wrong type stops the process with one line (exit 2),
with the nearest name for a typo (`has a query parameter 'socket_timout' it does not take (did
you mean socket_timeout?)`):
`redis+sentinel://replica:pw@sentinel-0:26379,sentinel-1:26379/mymaster/0?sentinel_password=spw`.
Percent-encode a password's `@`, `/`, `?`, `#` and `&` (`&` alone separates parameters; `;` is
an ordinary character). Every URL printed or logged shows its passwords as `***`. When the
server's answer makes the mistake clear (a password it requires, TLS on one side only, a
Sentinel named as a server, a service no sentinel knows, a server without Lua), the line says
what to change: see [Behaviour under faults](faults.md)."""

REPLICA = """\
## Replica (`fleetgate-replica`)

The handler is `async def handle(item)`: `item` is the JSON of a work stream entry's `item`
field. It succeeds by returning; it fails by raising (retried, then dead-lettered). A handler
that needs the replica's Redis client, fleet or id calls `replica.service.handlers.context()`.
`replica.demo:sleep` is the built-in demo handler."""

BREAKER = """\
## Circuit breaker

A handler plugs a breaker in by giving the function, or its module, an attribute `breaker`:
anything with a `state` of closed / open / half-open (`pybreaker.CircuitBreaker` works as it
is). The replica then holds its pool with `source="breaker"` while the breaker is open, and
releases only that hold when it is not. The default breaker is
`replica.service.breaker.AsyncCircuitBreaker`:

```python
from replica.service.breaker import AsyncCircuitBreaker

breaker = AsyncCircuitBreaker()          # FLEETGATE_BREAKER_FAIL_MAX / _RESET_TIMEOUT

async def handle(item):
    async with breaker:
        await call_the_dependency(item)
```"""

COORDINATOR = """\
## Coordinator (`fleetgate`)"""


def _coordinator_settings() -> type[BaseSettings] | None:
    try:
        from coordinator.settings import CoordinatorSettings
    except ImportError:
        return None
    return CoordinatorSettings


def section() -> str:
    """The section's content (without the markers)."""
    parts = [INTRO, URLS, REPLICA, settings_table(ReplicaSettings), BREAKER,
             settings_table(BreakerSettings)]
    coordinator = _coordinator_settings()
    if coordinator is not None:
        parts += [COORDINATOR, settings_table(coordinator)]
    return "\n\n".join(parts)


def current(text: str) -> str:
    """The section's content as it is in ``text``."""
    start = text.index(BEGIN) + len(BEGIN)
    end = text.index(END, start)
    return text[start:end].strip("\n")


def replace(text: str, content: str) -> str:
    start = text.index(BEGIN) + len(BEGIN)
    end = text.index(END, start)
    return text[:start] + "\n" + content + "\n" + text[end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="update docs/configuration.md in place")
    mode.add_argument("--check", action="store_true", help="exit 1 when docs/configuration.md differs")
    args = parser.parse_args(argv)
    content = section()
    if args.write:
        PAGE.write_text(replace(PAGE.read_text(encoding="utf-8"), content), encoding="utf-8")
        return 0
    if args.check:
        if current(PAGE.read_text(encoding="utf-8")) != content:
            print("docs/configuration.md is stale: run "
                  "python scripts/gen_config_docs.py --write", file=sys.stderr)
            return 1
        return 0
    print(content)
    return 0


if __name__ == "__main__":
    sys.exit(main())
