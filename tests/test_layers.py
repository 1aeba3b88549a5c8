"""The import rules of the tree: each layer imports only the layers below it.

Read from the source (every ``import`` statement, at module level or inside a function) and
checked at run time in a fresh interpreter (what ``import X`` really loads). The layers are
drawn in ``replica/__init__.py`` and ``coordinator/__init__.py`` and in the README's layout
section.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# The rank of each package of the tree: a module may import modules of a lower or equal rank
# within its own package, and of a lower rank elsewhere. The longest matching prefix wins.
RANKS: dict[str, int] = {
    "replica.errors": 0,
    "replica.types": 0,
    "replica.contract": 1,
    "replica.pool": 1,
    "replica.link": 2,
    "replica.process": 2,
    "replica.control": 3,
    "replica.service": 4,
    "replica.demo": 5,
    "replica.__main__": 5,
    "coordinator.durations": 6,
    "coordinator.settings": 7,
    "coordinator.fleet": 8,
    "coordinator.render": 9,
    "coordinator.notify": 9,
    "coordinator.web": 10,
    "coordinator.cli": 11,
    "coordinator.demo": 11,
    "coordinator.__main__": 12,
}

# What the operator's side may take of the replica's: what both sides share (the contract, the
# Redis link, a process's life, the leaves), never the replica's control loop or service. The
# demo alone runs a pool (and the replica's demo handlers) in process.
SHARED: tuple[str, ...] = (
    "replica.errors", "replica.types", "replica.contract", "replica.link", "replica.process"
)
COORDINATOR_MAY_IMPORT: dict[str, tuple[str, ...]] = {
    "coordinator.demo": (*SHARED, "replica.pool", "replica.demo"),
}

# Third-party packages a layer must never import, even lazily.
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "replica.pool": ("redis", "hiredis", "pydantic", "pydantic_settings", "fastapi", "uvicorn"),
    "replica.contract": ("redis", "hiredis", "pydantic", "pydantic_settings", "fastapi", "uvicorn"),
    "replica.errors": ("redis", "pydantic", "fastapi"),
    "replica.types": ("redis", "pydantic", "fastapi"),
    "replica.control": ("pydantic", "pydantic_settings", "fastapi", "uvicorn"),
    "replica.link": ("pydantic", "pydantic_settings", "fastapi", "uvicorn"),
    "replica.process": ("redis", "pydantic", "pydantic_settings", "fastapi"),
}

# Entry points that load a sibling only inside the command that needs it (``fleetgate serve``
# and ``fleetgate demo``): allowed inside a function, never at module level.
LAZY_SIBLINGS: frozenset[tuple[str, str]] = frozenset(
    {("coordinator.cli", "coordinator.web"), ("coordinator.cli", "coordinator.demo"),
     ("coordinator.demo", "coordinator.cli")}
)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _package(module: str) -> str | None:
    """The longest prefix of ``module`` that has a rank."""
    best = None
    for prefix in RANKS:
        if (module == prefix or module.startswith(prefix + ".")) and (
            best is None or len(prefix) > len(best)
        ):
            best = prefix
    return best


def _imports(path: Path) -> list[tuple[str, int, bool]]:
    """(imported module, line, at module level) for every import in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    top_level = {id(node) for node in tree.body}
    # ``if TYPE_CHECKING:`` blocks at module level import nothing at run time.
    type_only: set[int] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            type_only.update(id(n) for n in ast.walk(node))
    found: list[tuple[str, int, bool]] = []
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.append((alias.name, node.lineno, id(node) in top_level))
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                # ``from coordinator import render`` imports the module coordinator.render.
                found.append((f"{node.module}.{alias.name}", node.lineno, id(node) in top_level))
    return found


def _tree_modules() -> list[tuple[str, Path]]:
    out = []
    for root in ("replica", "coordinator"):
        for path in sorted((REPO / root).rglob("*.py")):
            out.append((_module_name(path), path))
    return out


def _violations(modules: list[tuple[str, Path]] | None = None) -> list[str]:
    problems: list[str] = []
    for module, path in _tree_modules() if modules is None else modules:
        if module in ("replica", "coordinator"):
            continue  # the package roots re-export lazily, by name, for users
        source_pkg = _package(module)
        if source_pkg is None:
            problems.append(f"{module}: not in any layer of RANKS")
            continue
        where = path.relative_to(REPO) if path.is_relative_to(REPO) else path.name
        for target, line, top in _imports(path):
            root = target.split(".")[0]
            for banned in FORBIDDEN.get(source_pkg, ()):
                if root == banned:
                    problems.append(f"{where}:{line}: {source_pkg} imports {banned}")
            if root not in ("replica", "coordinator"):
                continue
            if module.startswith("replica") and root == "coordinator":
                problems.append(f"{where}:{line}: replica imports coordinator ({target})")
                continue
            if module.startswith("coordinator") and root == "replica":
                allowed = COORDINATOR_MAY_IMPORT.get(source_pkg, SHARED)
                if not any(target == a or target.startswith(a + ".") for a in allowed):
                    problems.append(f"{where}:{line}: {source_pkg} imports {target}: the "
                                    f"coordinator takes of replica only {', '.join(allowed)}")
                    continue
            target_pkg = _package(target)
            if target_pkg is None:  # ``from replica import X``: the lazy root, allowed only above
                problems.append(f"{where}:{line}: imports the package root ({target})")
                continue
            if target_pkg == source_pkg:
                continue
            if RANKS[target_pkg] < RANKS[source_pkg]:
                continue
            if (source_pkg, target_pkg) in LAZY_SIBLINGS and not top:
                continue
            problems.append(
                f"{where}:{line}: {source_pkg} (rank {RANKS[source_pkg]}) imports "
                f"{target} ({target_pkg}, rank {RANKS[target_pkg]})"
            )
    return problems


def test_every_module_of_the_tree_belongs_to_a_layer() -> None:
    orphans = [m for m, _ in _tree_modules() if m not in ("replica", "coordinator")
               and _package(m) is None]
    assert orphans == []


def test_nothing_imports_upward_and_replica_never_imports_coordinator() -> None:
    assert _violations() == []


def test_the_rules_catch_an_upward_import(tmp_path: Path) -> None:
    """The checker itself: a pool module importing the controller, or redis, is reported."""
    bad = tmp_path / "_layer_probe.py"
    bad.write_text("from replica.control.controller import FleetController\nimport redis\n")
    problems = _violations([("replica.pool._layer_probe", bad)])
    assert any("_layer_probe.py:1: replica.pool (rank 1) imports replica.control" in p
               for p in problems)
    assert any("_layer_probe.py:2: replica.pool imports redis" in p for p in problems)


def test_the_rules_catch_the_coordinator_reaching_into_the_replicas_control_loop(
    tmp_path: Path,
) -> None:
    """The operator's side takes the Redis link and a process's life from the shared layer, not
    from ``replica.control`` or ``replica.service``; only the demo runs a pool."""
    bad = tmp_path / "_reach_probe.py"
    bad.write_text("from replica.control.sync import SyncLoop\n"
                   "from replica.service.source import StreamSource\n"
                   "from replica.link.redisio import uncancelled\n"
                   "from replica.pool import PausablePool\n")
    problems = _violations([("coordinator.fleet._reach_probe", bad)])
    lines = [p.split(": ")[0].rsplit(":", 1)[-1] for p in problems]
    assert lines == ["1", "2", "4"], problems
    in_demo = _violations([("coordinator.demo._reach_probe", bad)])
    assert [p.split(": ")[0].rsplit(":", 1)[-1] for p in in_demo] == ["1", "2"]


def _module_graph() -> dict[str, set[str]]:
    """Module-level imports between the tree's own modules (what runs at import time)."""
    modules = dict(_tree_modules())
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        edges = set()
        for target, _line, top in _imports(path):
            if not top:
                continue
            # ``from pkg.mod import name``: the module pkg.mod (or pkg.mod.name, a submodule)
            for candidate in (target, target.rsplit(".", 1)[0]):
                if candidate in modules and candidate != module:
                    edges.add(candidate)
                    break
        graph[module] = edges
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                group.append(top)
                if top == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_two_modules_import_each_other_at_module_level() -> None:
    """``coordinator.notify.consumer`` and ``.follow`` once did; a circle is reported."""
    graph = {m: e for m, e in _module_graph().items() if m not in ("replica", "coordinator")}
    assert _cycles(graph) == []
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def _loaded_after(statement: str) -> list[str]:
    """The top-level packages in sys.modules after running ``statement`` in a fresh process."""
    code = (
        "import sys, json\n"
        f"{statement}\n"
        "print('\\n' + json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO, timeout=60, check=True)
    loaded: list[str] = json.loads(out.stdout.rstrip("\n").rsplit("\n", 1)[-1])
    return loaded


@pytest.mark.parametrize(
    ("statement", "absent"),
    [
        ("import replica.pool", ("redis", "pydantic", "pydantic_settings", "fastapi")),
        ("from replica.pool import PausablePool, PoolStats", ("redis", "pydantic")),
        ("import replica.contract", ("redis", "pydantic", "pydantic_settings", "fastapi")),
        ("import replica.errors", ("redis", "pydantic")),
        ("import replica", ("redis", "pydantic", "fastapi", "uvicorn")),
        ("import coordinator.cli.app", ("fastapi", "uvicorn", "starlette")),
        ("import coordinator.cli", ("fastapi", "uvicorn", "redis", "pydantic", "rich")),
        ("import coordinator", ("fastapi", "uvicorn", "redis", "pydantic")),
        # the command line: typer reads the commands' signatures; their bodies load the rest
        ("from coordinator.cli.app import main; main(['--help'])",
         ("redis", "pydantic", "pydantic_settings", "rich", "asyncio", "fastapi", "uvicorn")),
        # (typer coerces a command's parameters with pydantic: pydantic_settings is ours)
        ("from coordinator.cli.app import main; main(['pause', '--help'])",
         ("redis", "pydantic_settings", "rich", "asyncio", "fastapi", "uvicorn")),
        ("import coordinator.render, coordinator.render.text", ("redis", "pydantic", "fastapi")),
    ],
)
def test_importing_a_layer_loads_nothing_it_does_not_need(
    statement: str, absent: tuple[str, ...]
) -> None:
    loaded = _loaded_after(statement)
    assert [name for name in absent if name in loaded] == []


def test_the_public_names_still_import_from_the_package_roots() -> None:
    code = (
        "from replica import PausablePool, FleetController, StreamSource, ReplicaSettings\n"
        "from replica import follow_breaker, AsyncCircuitBreaker, ConfigError, context\n"
        "from coordinator import Fleet, WaitReport\n"
        "import replica, coordinator\n"
        "for pkg in (replica, coordinator):\n"
        "    for name in pkg.__all__:\n"
        "        getattr(pkg, name)\n"
        "print(PausablePool.__module__, FleetController.__module__, Fleet.__module__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO, timeout=60, check=True)
    assert out.stdout.split() == [
        "replica.pool.pool", "replica.control.controller", "coordinator.fleet.fleet"
    ]


def test_an_unknown_name_on_a_package_root_is_an_attribute_error() -> None:
    import replica

    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = replica.Nope  # type: ignore[attr-defined]
