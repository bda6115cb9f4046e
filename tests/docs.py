"""Commands of the documentation, for the tests that run them as written."""

from __future__ import annotations

import re
from typing import Any

import yaml

from tests.datasets import REPO_ROOT

OPERATIONS = REPO_ROOT / "docs" / "operations.md"
OPERATIONS_SECTIONS = ("Why is my pod pending", "Why was my pod evicted", "Dry-run first")
"""The sections of docs/operations.md whose commands the demo test and the unit tests run."""
KUEUE = REPO_ROOT / "docs" / "kueue.md"
KUEUE_DRA_SECTION = "Dynamic Resource Allocation (ResourceClaimTemplates)"
DEMO_DIR = "_out/demo"
"""The demo's folder as the documentation names it: commands with it need the demo cluster."""


def section_blocks(text: str, heading: str, language: str) -> list[str]:
    """The fenced `language` blocks of the `## heading` section of markdown `text`."""
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, flags=re.S | re.M)
    assert match is not None, f"no section {heading!r}"
    return re.findall(rf"```{language}\n(.*?)```", match.group(1), flags=re.S)


def operations_commands() -> list[str]:
    """Every command line of `OPERATIONS_SECTIONS`, in order."""
    text = OPERATIONS.read_text()
    return [
        line.strip()
        for heading in OPERATIONS_SECTIONS
        for block in section_blocks(text, heading, "sh")
        for line in block.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]


def kueue_recipe() -> dict[tuple[str, str], dict[str, Any]]:
    """The objects of the `## Recipe` section of docs/kueue.md (one yaml block), by (kind, name)."""
    (block,) = section_blocks(KUEUE.read_text(), "Recipe", "yaml")
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(block) if d}


def kueue_dra_recipe() -> tuple[dict[str, Any], dict[tuple[str, str], dict[str, Any]]]:
    """The `KUEUE_DRA_SECTION` of docs/kueue.md: Kueue's Configuration excerpt (its first yaml
    block) and the objects of its second, by (kind, name)."""
    config_block, objects_block = section_blocks(KUEUE.read_text(), KUEUE_DRA_SECTION, "yaml")
    config: dict[str, Any] = yaml.safe_load(config_block)
    objects = {
        (d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(objects_block) if d
    }
    return config, objects
