"""Every shell script under hack/ is shellcheck clean (Debian's `shellcheck`, which
hack/setup.sh installs)."""

from __future__ import annotations

import shutil
import subprocess

from tests.datasets import REPO_ROOT


def test_every_hack_script_is_shellcheck_clean() -> None:
    shellcheck = shutil.which("shellcheck")
    assert shellcheck, "shellcheck is missing: run hack/setup.sh (it installs Debian's shellcheck)"
    scripts = sorted(str(p.relative_to(REPO_ROOT)) for p in (REPO_ROOT / "hack").rglob("*.sh"))
    assert "hack/setup.sh" in scripts and "hack/kind/up.sh" in scripts
    done = subprocess.run(
        [shellcheck, "--external-sources", "--source-path=SCRIPTDIR", *scripts],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:]
