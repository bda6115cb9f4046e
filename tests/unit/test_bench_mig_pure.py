"""hack.bench.mig on a small stream: both orders see the same asks, placements never exceed
them, and on one GPU the aware order places at least as many 3g/4g as first fit."""

from __future__ import annotations

import pytest

from hack.bench.mig import figures, main, simulate


def test_small_stream() -> None:
    aware = simulate(0, 1, 60, 0.45, True)
    first = simulate(0, 1, 60, 0.45, False)
    assert aware.steps == first.steps == 60
    for tally in (aware, first):
        assert 0 < tally.placed <= tally.asks
        assert tally.big_placed <= tally.big_asks <= tally.asks
        assert 0 <= figures(tally)["largest"] <= 8
    assert aware.big_placed >= first.big_placed


def test_main_prints_a_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--seeds", "1", "--requests", "20"]) == 0
    out = capsys.readouterr().out
    assert "big placed" in out and "first fit" in out
