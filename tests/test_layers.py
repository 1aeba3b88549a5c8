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
    "replica.control": 2,
    "replica.service": 3,
    "replica.demo": 4,
    "replica.__main__": 4,
    "coordinator.durations": 5,
    "coordinator.settings": 6,
    "coordinator.fleet": 7,
    "coordinator.render": 8,
    "coordinator.notify": 8,
    "coordinator.web": 9,
    "coordinator.cli": 10,
    "coordinator.demo": 10,
    "coordinator.__main__": 11,
}

# Third-party packages a layer must never import, even lazily.
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "replica.pool": ("redis", "hiredis", "pydantic", "pydantic_settings", "fastapi", "uvicorn"),
    "replica.contract": ("redis", "hiredis", "pydantic", "pydantic_settings", "fastapi", "uvicorn"),
    "replica.errors": ("redis", "pydantic", "fastapi"),
    "replica.types": ("redis", "pydantic", "fastapi"),
    "replica.control": ("pydantic", "pydantic_settings", "fastapi", "uvicorn"),
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
