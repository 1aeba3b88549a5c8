"""The reference site (``docs/``, ``mkdocs.yml``) builds with ``mkdocs build --strict``, so a
broken link, a missing page or a page left out of the nav fails the suite; each page says what
it is for in its first lines; the README's links to it resolve.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
CONFIG = ROOT / "mkdocs.yml"


def _mkdocs() -> list[str]:
    try:
        import material  # noqa: F401
        import mkdocs  # noqa: F401
    except ImportError:
        pytest.skip("mkdocs or mkdocs-material is not installed (the test extra installs them)")
    return [sys.executable, "-m", "mkdocs"]


def _build(root: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*_mkdocs(), "build", "--strict", "--config-file", str(root / "mkdocs.yml"),
         "--site-dir", str(site)],
        cwd=root, capture_output=True, text=True, timeout=100,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )


def _nav_pages(nav: object) -> list[str]:
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [page for item in nav for page in _nav_pages(item)]
    if isinstance(nav, dict):
        return [page for value in nav.values() for page in _nav_pages(value)]
    return []


def test_the_site_builds_with_strict_checks(tmp_path: Path) -> None:
    done = _build(ROOT, tmp_path / "site")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "index.html").exists()
    assert (tmp_path / "site" / "contract" / "index.html").exists()


def test_a_broken_link_in_a_page_fails_the_strict_build(tmp_path: Path) -> None:
    shutil.copytree(DOCS, tmp_path / "docs")
    shutil.copy(CONFIG, tmp_path / "mkdocs.yml")
    page = tmp_path / "docs" / "faults.md"
    page.write_text(page.read_text(encoding="utf-8") + "\nSee [the runbook](runbook.md).\n",
                    encoding="utf-8")
    done = _build(tmp_path, tmp_path / "site")
    assert done.returncode != 0
    assert "runbook.md" in done.stdout + done.stderr


def test_a_broken_anchor_in_a_page_fails_the_strict_build(tmp_path: Path) -> None:
    shutil.copytree(DOCS, tmp_path / "docs")
    shutil.copy(CONFIG, tmp_path / "mkdocs.yml")
    page = tmp_path / "docs" / "faults.md"
    page.write_text(page.read_text(encoding="utf-8")
                    + "\nSee [the URLs](configuration.md#redis-urlz).\n", encoding="utf-8")
    done = _build(tmp_path, tmp_path / "site")
    assert done.returncode != 0
    assert "redis-urlz" in done.stdout + done.stderr


def test_every_page_is_in_the_nav_and_every_nav_entry_is_a_page() -> None:
    nav = _nav_pages(yaml.safe_load(CONFIG.read_text(encoding="utf-8"))["nav"])
    assert sorted(nav) == sorted(p.name for p in DOCS.glob("*.md"))
    assert nav[0] == "index.md"


@pytest.mark.parametrize("page", sorted(p.name for p in DOCS.glob("*.md")))
def test_every_page_says_what_it_is_for_in_its_first_lines(page: str) -> None:
    text = (DOCS / page).read_text(encoding="utf-8")
    title, blank, first, *_ = text.split("\n")
    assert title.startswith("# ") and not blank
    assert re.match(r"This (page|site) is (for|the reference)", first), first


def test_every_relative_link_of_the_readme_names_a_file_that_exists() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", readme)
    assert any(link.startswith("docs/") for link in links)
    missing = [link for link in links if not (ROOT / link).exists()]
    assert not missing, missing
