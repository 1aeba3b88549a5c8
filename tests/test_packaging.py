"""`make demo` installs what the code imports: `dependencies` plus the `demo` extra.

`make demo` on a fresh clone runs before `make test` ever installed the `test` extra, so a
module that replica/ or coordinator/ imports from a package listed only there fails the demo
(it did: the demo imported httpx). Optional extras (an `otel` one, say) are allowed for modules
that import their package only inside a try/except ImportError.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("replica", "coordinator")


def _name(requirement: str) -> str:
    found = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert found is not None, requirement
    return re.sub(r"[-_.]+", "-", found.group(0)).lower()


def _guarded(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """Whether an import sits in a try whose handlers catch ImportError."""
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.Try):
            for handler in node.handlers:
                text = ast.unparse(handler.type) if handler.type else ""
                if "ImportError" in text or "ModuleNotFoundError" in text:
                    return True
    return False


def _top_level_imports() -> dict[str, str]:
    """Third-party top-level modules imported (unguarded) by the shipped packages -> a file."""
    found: dict[str, str] = {}
    stdlib = set(sys.stdlib_module_names)
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                if _guarded(node, parents):
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top in stdlib or top in PACKAGES or top == "__future__":
                        continue
                    found.setdefault(top, str(path.relative_to(ROOT)))
    return found


def _extras(requirement: str) -> set[str]:
    found = re.match(r"[A-Za-z0-9._-]+\[([^\]]*)\]", requirement)
    return {e.strip() for e in found.group(1).split(",")} if found else set()


def _closure(requirements: list[str]) -> set[str]:
    """The distributions these requirements install, with what they pull in (extras included)."""
    seen: set[str] = set()
    todo = [(_name(r), _extras(r)) for r in requirements]
    while todo:
        name, extras = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for requirement in requires:
            marker = re.search(r'extra\s*==\s*"([^"]+)"', requirement)
            if marker and marker.group(1) not in extras:
                continue
            todo.append((_name(requirement), _extras(requirement)))
    return seen


def test_every_module_the_code_imports_is_installed_by_make_demo() -> None:
    distributions = metadata.packages_distributions()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    installed = _closure(
        list(project["dependencies"]) + list(project["optional-dependencies"]["demo"])
    )
    missing = {}
    for module, where in _top_level_imports().items():
        dists = {_name(d) for d in distributions.get(module, [module])}
        if not dists & installed:
            missing[module] = where
    assert not missing, f"imported but not installed by `make demo`: {missing}"


def test_the_ci_script_runs_the_readme_commands_in_the_readme_order() -> None:
    lines = [
        line.strip()
        for line in (ROOT / ".ci" / "run").read_text().splitlines()
        if line.strip().startswith("make ")
    ]
    assert lines == ["make demo", "make test"]
