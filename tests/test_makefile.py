"""The Makefile's choice of interpreter and the tool installer, on a PATH of the test's own.

Only Python 3.11 exists on the machine, so the interpreters here are stand-ins: shell scripts
that answer the version check as a python3.N of that version would.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BASH = shutil.which("bash") or "/bin/bash"
MAKE = shutil.which("make")


def _stand_in(bin_dir: Path, name: str, minor: int) -> None:
    """A python3.<minor> that runs `-c` checks of sys.version_info as that version would."""
    ok = 0 if minor >= 11 else 1
    script = bin_dir / name
    script.write_text(
        "#!" + BASH + "\n"
        'case "$2" in\n'
        f"  *version_info\\[:2\\]*) echo 3.{minor} ;;\n"
        f"  *) exit {ok} ;;\n"
        "esac\n"
    )
    script.chmod(0o755)


def _find(bin_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [BASH, str(ROOT / "scripts" / "find-python.sh")],
        env={"PATH": str(bin_dir)},
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_the_newest_python_at_or_above_3_11_is_chosen(tmp_path: Path) -> None:
    for minor in (11, 12, 13):
        _stand_in(tmp_path, f"python3.{minor}", minor)
    _stand_in(tmp_path, "python3", 11)
    done = _find(tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "python3.13"


def test_a_machine_with_only_3_12_uses_it(tmp_path: Path) -> None:
    _stand_in(tmp_path, "python3.12", 12)
    done = _find(tmp_path)
    assert (done.returncode, done.stdout.strip()) == (0, "python3.12")


def test_python3_is_used_when_it_is_new_enough_and_no_versioned_name_exists(
    tmp_path: Path,
) -> None:
    _stand_in(tmp_path, "python3", 13)
    done = _find(tmp_path)
    assert (done.returncode, done.stdout.strip()) == (0, "python3")


def test_an_old_python3_alone_is_refused_in_one_line_that_names_the_version(
    tmp_path: Path,
) -> None:
    _stand_in(tmp_path, "python3", 9)
    _stand_in(tmp_path, "python3.10", 10)
    done = _find(tmp_path)
    assert done.returncode == 1
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "3.11 or newer" in lines[0] and "3.9" in lines[0]


def test_no_python_at_all_is_said_in_one_line(tmp_path: Path) -> None:
    done = _find(tmp_path)
    assert done.returncode == 1
    assert len(done.stderr.strip().splitlines()) == 1
    assert "3.11 or newer" in done.stderr


@pytest.mark.skipif(MAKE is None, reason="make is not installed")
def test_make_creates_its_venv_with_the_interpreter_the_script_finds(tmp_path: Path) -> None:
    _stand_in(tmp_path, "python3.12", 12)
    _stand_in(tmp_path, "python3.14", 14)
    assert MAKE is not None
    done = subprocess.run(
        [MAKE, "-s", "-C", str(ROOT), "which-python"],
        env={"PATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "python3.14"
    refused = subprocess.run(
        [MAKE, "-s", "-C", str(ROOT), "which-python"],
        env={"PATH": str(tmp_path / "empty")},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert refused.returncode != 0
    assert "3.11 or newer" in refused.stderr


def _link(bin_dir: Path, *names: str) -> None:
    for name in names:
        found = shutil.which(name)
        if found is None:
            pytest.skip(f"{name} is not installed")
        (bin_dir / name).symlink_to(found)


def test_installing_tools_ends_no_process_it_did_not_start(tmp_path: Path) -> None:
    """A `prometheus` of the user's survives the installer, and no daemon may start meanwhile."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _link(bin_dir, "pkill", "printf", "chmod", "rm", "cat")
    seen = tmp_path / "policy-seen"
    policy = tmp_path / "policy-rc.d"
    (bin_dir / "id").write_text("#!" + BASH + "\necho 0\n")
    (bin_dir / "apt-get").write_text(
        "#!" + BASH + "\n"
        f'if [[ " $* " == *" install "* ]]; then "{policy}"; echo "$?" > "{seen}"; fi\n'
        "exit 0\n"
    )
    for name in ("id", "apt-get"):
        (bin_dir / name).chmod(0o755)
    users = tmp_path / "prometheus"
    sleep = shutil.which("sleep")
    assert sleep is not None
    shutil.copy(sleep, users)
    theirs = subprocess.Popen([str(users), "60"])
    try:
        done = subprocess.run(
            [BASH, str(ROOT / "scripts" / "ensure-tools.sh")],
            env={"PATH": str(bin_dir), "POLICY_RC_D": str(policy)},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert "installing" in done.stdout
        assert theirs.poll() is None, "the installer ended a prometheus it did not start"
        assert seen.read_text().strip() == "101", "services could start during the install"
        assert not policy.exists(), "the installer left its policy-rc.d behind"
    finally:
        theirs.send_signal(signal.SIGKILL)
        theirs.wait()


def _as_root_with_apt(tmp_path: Path, apt_get: str) -> subprocess.CompletedProcess[str]:
    """ensure-tools.sh run as root (a fake ``id``) with nothing installed and ``apt-get`` the
    given bash body."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _link(bin_dir, "printf", "chmod", "rm", "sleep", "wc")
    (bin_dir / "id").write_text("#!" + BASH + "\necho 0\n")
    (bin_dir / "apt-get").write_text("#!" + BASH + "\n" + apt_get)
    for name in ("id", "apt-get"):
        (bin_dir / name).chmod(0o755)
    return subprocess.run(
        [BASH, str(ROOT / "scripts" / "ensure-tools.sh")],
        env={"PATH": str(bin_dir), "POLICY_RC_D": str(tmp_path / "policy-rc.d")},
        capture_output=True, text=True, timeout=60,
    )


def test_an_apt_lock_held_by_another_run_is_waited_for_not_taken_as_a_failure(
    tmp_path: Path,
) -> None:
    """apt-get update has no lock timeout: while it says another run holds its lock, the
    installer tries again (bounded), then installs; install itself is told to wait."""
    calls = tmp_path / "calls"
    done = _as_root_with_apt(tmp_path, (
        f'echo "$*" >> "{calls}"\n'
        f'if [[ " $* " == *" update "* ]] && [ "$(wc -l < "{calls}")" -lt 3 ]; then\n'
        '  echo "E: Could not get lock /var/lib/apt/lists/lock. It is held by process 1 (apt-get)"\n'
        "  exit 100\n"
        "fi\n"
        "exit 0\n"
    ))
    assert done.returncode == 0, done.stderr
    assert "apt-get failed" not in done.stdout, done.stdout
    said = calls.read_text().splitlines()
    assert [" update " in f" {c} " for c in said] == [True, True, True, False], said
    assert all("DPkg::Lock::Timeout=" in c for c in said), said
    assert " install " in f" {said[-1]} "


def test_an_apt_failure_that_is_not_a_lock_is_said_at_once(tmp_path: Path) -> None:
    done = _as_root_with_apt(tmp_path, 'echo "E: The repository is not signed." >&2\nexit 100\n')
    assert done.returncode == 0, done.stderr
    assert "ensure-tools: apt-get failed" in done.stdout, done.stdout


def test_an_existing_policy_rc_d_is_left_as_it_was(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _link(bin_dir, "printf", "chmod", "rm")
    (bin_dir / "id").write_text("#!" + BASH + "\necho 0\n")
    (bin_dir / "apt-get").write_text("#!" + BASH + "\nexit 0\n")
    for name in ("id", "apt-get"):
        (bin_dir / name).chmod(0o755)
    policy = tmp_path / "policy-rc.d"
    policy.write_text("#!/bin/sh\nexit 0\n")
    done = subprocess.run(
        [BASH, str(ROOT / "scripts" / "ensure-tools.sh")],
        env={"PATH": str(bin_dir), "POLICY_RC_D": str(policy), "HOME": os.environ.get("HOME", "/")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert policy.read_text() == "#!/bin/sh\nexit 0\n"
