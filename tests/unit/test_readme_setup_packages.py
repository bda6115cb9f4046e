"""The README lists every Debian package hack/setup.sh installs, and how many there are."""

from __future__ import annotations

import re

from tests.datasets import REPO_ROOT


def setup_packages() -> list[str]:
    """The keys of setup.sh's `packages` table (Debian package -> a file it installs)."""
    text = (REPO_ROOT / "hack" / "setup.sh").read_text()
    table = re.search(r"declare -A packages=\((.*?)\n\)", text, flags=re.S)
    assert table is not None, "no packages table in hack/setup.sh"
    return re.findall(r"^\s*\[([a-z0-9.+-]+)\]=", table.group(1), flags=re.M)


def test_the_readme_names_every_package_setup_installs() -> None:
    packages = setup_packages()
    assert "prometheus" in packages
    readme = (REPO_ROOT / "README.md").read_text()
    prerequisites = readme[readme.index("Prerequisites:") : readme.index("```sh")]
    named = set(re.findall(r"`([a-z0-9.+-]+)`", prerequisites))
    assert set(packages) <= named, set(packages) - named
    assert f"these {len(packages)} Debian packages" in " ".join(prerequisites.split())
