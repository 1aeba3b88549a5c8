"""The configuration page (docs/configuration.md) is generated from the settings classes."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gen_config_docs.py"


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_config_docs", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_configuration_page_is_what_the_generator_prints() -> None:
    gen = generator()
    page = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert gen.current(page) == gen.section(), (
        "docs/configuration.md is stale: run python scripts/gen_config_docs.py --write"
    )


def test_every_replica_and_breaker_setting_is_documented() -> None:
    from replica.service.settings import BreakerSettings, ReplicaSettings

    section = generator().section()
    for cls, prefix in ((ReplicaSettings, "FLEETGATE_"), (BreakerSettings, "FLEETGATE_BREAKER_")):
        for name in cls.model_fields:
            row = next(line for line in section.splitlines() if f"`{prefix}{name.upper()}`" in line)
            assert row.rstrip(" |").split("|")[-1].strip(), f"{name} has no description"


def test_the_coordinator_settings_are_documented_when_they_exist() -> None:
    try:
        from coordinator.settings import CoordinatorSettings
    except ImportError:
        return
    section = generator().section()
    for name in CoordinatorSettings.model_fields:
        assert f"`FLEETGATE_{name.upper()}`" in section


def test_the_check_mode_passes_on_the_committed_page() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True,
                          timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr.decode()
