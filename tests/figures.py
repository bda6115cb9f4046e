"""Checks of the PNG figures the `--plot` flags write."""

from __future__ import annotations

from pathlib import Path

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
MAX_FIGURE_BYTES = 150 * 1024
"""The largest figure the documentation may carry (docs/figures/)."""


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR chunk, after checking the file's signature."""
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC, f"{path} is not a PNG"
    assert data[12:16] == b"IHDR"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
