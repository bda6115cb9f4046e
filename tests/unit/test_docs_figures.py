"""The figures of the documentation (docs/figures/): small PNGs, each shown by one page that also
gives the command that drew it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from scheduler.tools.plots import BUSY_SHARE_SIZE, SIMULATION_SIZE
from tests.datasets import REPO_ROOT
from tests.figures import MAX_FIGURE_BYTES, png_size

DOCS = REPO_ROOT / "docs"
FIGURES = sorted((DOCS / "figures").glob("*"))
FIGURE_DIR_COMMAND = "GPU_SCHEDULER_FIGURE_DIR=docs/figures"
"""How a test is told to write its figure into docs/figures (tests/integration)."""


def showing(figure: Path) -> list[Path]:
    """The pages with an image link to `figure`."""
    link = f"](figures/{figure.name})"
    return [page for page in sorted(DOCS.glob("*.md")) if link in page.read_text()]


def test_there_are_figures() -> None:
    assert [f.name for f in FIGURES] == [
        "idle-report-busy-share.png",
        "simulate-openb-gpu-nodes.png",
    ]


@pytest.mark.parametrize("figure", FIGURES, ids=lambda f: f.name)
def test_each_figure_is_small_shown_once_and_comes_with_its_command(figure: Path) -> None:
    assert png_size(figure) in (SIMULATION_SIZE, BUSY_SHARE_SIZE)
    assert figure.stat().st_size <= MAX_FIGURE_BYTES
    (page,) = showing(figure)
    blocks = re.findall(r"```[a-z]*\n(.*?)```", page.read_text(), flags=re.S)
    commands = [b for b in blocks if f"docs/figures/{figure.name}" in b or FIGURE_DIR_COMMAND in b]
    assert commands, f"{page.name} shows {figure.name} without the command that drew it"
