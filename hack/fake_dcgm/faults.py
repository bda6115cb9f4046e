"""Injected GPU faults of a fake node: Xid codes and uncorrectable ECC errors, from annotations.

Contract: a fake node annotated

    fake-dcgm.gpu-scheduler.io/xid: "3=79"       (GPU index = last Xid code; "3=79,5=48" for two)
    fake-dcgm.gpu-scheduler.io/ecc-dbe: "5=2"    (GPU index = volatile double-bit ECC errors)

reports, for those GPUs, ``DCGM_FI_DEV_XID_ERRORS`` with that code and
``DCGM_FI_DEV_ECC_DBE_VOL_TOTAL`` with that count (every other GPU reports 0 in both, as a
healthy GPU does). Removing the annotation clears the fault. :func:`node_faults` never raises:
a malformed entry is skipped and reported in ``problems``.

On a DRA node (GPUs published in its ResourceSlice, `hack.fake_dcgm.dra_holders`) the index is
that of the GPU the exporter serves, whose UUID is the slice device's (`hack.fake_dcgm.identity`).
An index the node does not have is ignored.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

XID_ANNOTATION = "fake-dcgm.gpu-scheduler.io/xid"
ECC_DBE_ANNOTATION = "fake-dcgm.gpu-scheduler.io/ecc-dbe"
FAULT_ANNOTATIONS = (XID_ANNOTATION, ECC_DBE_ANNOTATION)
MAX_INDEX = 1023
MAX_VALUE = 2**31 - 1
_ENTRY = re.compile(r"\s*([0-9]{1,4})\s*=\s*([0-9]{1,10})\s*")


@dataclass(frozen=True)
class GpuFaults:
    """What one GPU reports: its last Xid code (0: none) and volatile DBE count."""

    xid: int = 0
    ecc_dbe: int = 0


def _entries(node: str, key: str, text: str, problems: list[str]) -> dict[int, int]:
    found: dict[int, int] = {}
    for part in text.split(","):
        if not part.strip():
            continue
        match = _ENTRY.fullmatch(part)
        index = int(match.group(1)) if match else -1
        value = int(match.group(2)) if match else -1
        if match is None or index > MAX_INDEX or value > MAX_VALUE:
            problems.append(
                f"node {node}: annotation {key}: {part.strip()!r} is not INDEX=VALUE "
                f"(index 0..{MAX_INDEX}); skipped"
            )
            continue
        found[index] = value
    return found


def node_faults(
    node: str, annotations: Mapping[str, str], problems: list[str]
) -> dict[int, GpuFaults]:
    """The faults the node's annotations inject, by GPU index (only GPUs with a fault)."""
    xids = _entries(node, XID_ANNOTATION, annotations.get(XID_ANNOTATION, ""), problems)
    dbes = _entries(node, ECC_DBE_ANNOTATION, annotations.get(ECC_DBE_ANNOTATION, ""), problems)
    return {
        index: GpuFaults(xids.get(index, 0), dbes.get(index, 0))
        for index in sorted(set(xids) | set(dbes))
    }
