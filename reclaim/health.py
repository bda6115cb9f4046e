"""GPU health verdicts from dcgm-exporter's error series: which GPUs must never be chosen.

Pure: the PromQL text (`health_query`), the reading of its answer (`gpu_signals`) and the
verdict (`judge`) take and return plain data; `read_health` is the one coroutine, sending the
query through `reclaim.prometheus.PrometheusClient`.

Signals (per GPU: node, index and UUID, labels as dcgm-exporter writes them), all judged over
the last `lookback_s` seconds, so a GPU recovers only once its signal stayed clear that long:

- ``DCGM_FI_DEV_XID_ERRORS`` (a dcgm-exporter default, a gauge holding the code of the LAST Xid
  the GPU reported): the most recent code of the fatal list seen in the window
  (``last_over_time`` of a subquery over the series filtered to those codes). The gauge keeps its
  last value, so a GPU whose last Xid was fatal stays sick until the exporter reports another
  value (after a GPU reset or driver reload) and that value stayed clear for the window. Codes
  outside the list (application faults such as 13, 31, 43, 45) never make a GPU sick.
- ``DCGM_FI_DEV_ECC_DBE_VOL_TOTAL`` (double-bit, i.e. uncorrectable, volatile ECC errors since
  the last driver load or GPU reset; NOT in dcgm-exporter's default counters, operators enable
  it in their counters file): any sample above 0 in the window. A volatile count above 0 means
  an uncorrectable error happened since the GPU was last reset.
- ``DCGM_FI_DEV_ROW_REMAP_FAILURE`` (a default, 1 when remapping a row failed): any sample above
  0 in the window. ``DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS`` alone does not make a GPU sick:
  NVML documents that a pending remapping does not affect future work on the GPU.

Default fatal Xids (`DEFAULT_FATAL_XIDS`): the codes NVIDIA's Xid catalog (docs.nvidia.com,
deploy/xid-errors, "Analyzing Xid Errors with the Xid Catalog") resolves with a GPU reset or
more rather than an application restart: 48 (double-bit ECC error), 63 and 64 (row remapping /
page retirement recorded or failed: the reset activates it), 74 (NVLink error), 79 (GPU fallen
off the bus), 95 (uncontained ECC error), 109 (context switch timeout), 119 and 120 (GSP RPC
timeout, GSP error), 140 (unrecovered ECC error). 94 (contained ECC error: the catalog says
restart the application) and 92 (high single-bit error rate) are left out. NVIDIA's device
plugin treats 13, 31, 43, 45, 68 and 109 as application errors; the list is a setting
(`health.fatalXids`).

A GPU the answer says nothing about is healthy: with no data (or Prometheus down, which the
caller handles by keeping its previous verdicts) nothing is withheld.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from reclaim.prometheus import PrometheusClient, Sample
from reclaim.promql import DEFAULT_LABELS, SIGNAL_LABEL, LabelNames, batch, duration

XID_ERRORS = "DCGM_FI_DEV_XID_ERRORS"
ECC_DBE_VOLATILE = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"
ROW_REMAP_FAILURE = "DCGM_FI_DEV_ROW_REMAP_FAILURE"

DEFAULT_FATAL_XIDS: tuple[int, ...] = (48, 63, 64, 74, 79, 95, 109, 119, 120, 140)
"""Xid codes that make a GPU sick by default (see the module docstring)."""
DEFAULT_LOOKBACK_S = 600.0

XID_SIGNAL = "xid"
DBE_SIGNAL = "ecc_dbe"
REMAP_SIGNAL = "row_remap_failure"


@dataclass(frozen=True, slots=True, order=True)
class GpuRef:
    """One physical GPU: its node, index on the node and UUID ("" when the series have none)."""

    node: str
    index: int
    uuid: str = ""


@dataclass(frozen=True, slots=True)
class GpuSignals:
    """What the answer says of one GPU over the lookback window."""

    gpu: GpuRef
    xid: int | None = None
    """The most recent fatal Xid code seen, None when none was."""
    dbe_errors: int = 0
    """The highest volatile double-bit ECC error count seen."""
    remap_failed: bool = False


@dataclass(frozen=True, slots=True)
class Sickness:
    """Why a GPU must not be chosen; at least one field is set."""

    xid: int | None = None
    dbe_errors: int = 0
    remap_failed: bool = False

    def kinds(self) -> tuple[str, ...]:
        """Short machine-readable reasons, e.g. ("xid_79", "ecc_dbe"): metric label values and
        DeviceTaintRule taint values."""
        found = []
        if self.xid is not None:
            found.append(f"{XID_SIGNAL}_{self.xid}")
        if self.dbe_errors:
            found.append(DBE_SIGNAL)
        if self.remap_failed:
            found.append(REMAP_SIGNAL)
        return tuple(found)

    def describe(self) -> str:
        """For people: "XID 79", "2 uncorrectable ECC errors", "row remapping failed"."""
        parts = []
        if self.xid is not None:
            parts.append(f"XID {self.xid}")
        if self.dbe_errors:
            plural = "s" if self.dbe_errors != 1 else ""
            parts.append(f"{self.dbe_errors} uncorrectable ECC error{plural}")
        if self.remap_failed:
            parts.append("row remapping failed")
        return ", ".join(parts)


def judge(signals: Iterable[GpuSignals], fatal_xids: Iterable[int]) -> dict[GpuRef, Sickness]:
    """The sick GPUs among `signals`: a fatal Xid code (one of `fatal_xids`), an uncorrectable
    ECC error count above 0 or a failed row remapping. Signals of one GPU given twice are merged
    (the highest count, any failure, the first Xid)."""
    fatal = frozenset(fatal_xids)
    verdicts: dict[GpuRef, Sickness] = {}
    for signal in signals:
        xid = signal.xid if signal.xid in fatal else None
        if xid is None and signal.dbe_errors <= 0 and not signal.remap_failed:
            continue
        old = verdicts.get(signal.gpu, Sickness())
        verdicts[signal.gpu] = Sickness(
            xid=old.xid if old.xid is not None else xid,
            dbe_errors=max(old.dbe_errors, max(signal.dbe_errors, 0)),
            remap_failed=old.remap_failed or signal.remap_failed,
        )
    return verdicts


def health_queries(
    fatal_xids: Sequence[int],
    lookback_s: float,
    step_s: float,
    labels: LabelNames = DEFAULT_LABELS,
) -> dict[str, str]:
    """The sub-expressions of the health query by signal, each one element per GPU (labels
    node, gpu, UUID): the last fatal Xid seen in the window (absent when none or no fatal codes
    are given), the highest volatile DBE count above 0, the remap failure flag above 0.
    `step_s` is the subquery resolution for the Xid gauge (the scrape interval)."""
    window = duration(lookback_s)
    by = f"by ({labels.node}, {labels.gpu}, {labels.uuid})"
    queries: dict[str, str] = {}
    codes = sorted(set(fatal_xids))
    if codes:
        fatal = " or ".join(f"{XID_ERRORS} == {code}" for code in codes)
        subquery = f"[{window}:{duration(step_s)}]"
        queries[XID_SIGNAL] = f"max {by} (last_over_time(({fatal}){subquery}))"
    queries[DBE_SIGNAL] = f"max {by} (max_over_time({ECC_DBE_VOLATILE}[{window}])) > 0"
    queries[REMAP_SIGNAL] = f"max {by} (max_over_time({ROW_REMAP_FAILURE}[{window}])) > 0"
    return queries


def health_query(
    fatal_xids: Sequence[int],
    lookback_s: float,
    step_s: float,
    labels: LabelNames = DEFAULT_LABELS,
) -> str:
    """`health_queries` batched into one expression (one HTTP request per period)."""
    return batch(health_queries(fatal_xids, lookback_s, step_s, labels))


def gpu_signals(samples: Iterable[Sample], labels: LabelNames = DEFAULT_LABELS) -> list[GpuSignals]:
    """The answer of `health_query` per GPU, sorted. Elements without a node or an integer GPU
    index, with an unknown marker or a value that is not finite are skipped."""
    found: dict[GpuRef, dict[str, float]] = {}
    for sample in samples:
        node = sample.labels.get(labels.node, "")
        index = sample.labels.get(labels.gpu, "")
        signal = sample.labels.get(SIGNAL_LABEL, "")
        if not node or not index.isdigit() or not math.isfinite(sample.value):
            continue
        if signal not in (XID_SIGNAL, DBE_SIGNAL, REMAP_SIGNAL):
            continue
        gpu = GpuRef(node, int(index), sample.labels.get(labels.uuid, ""))
        found.setdefault(gpu, {})[signal] = sample.value
    signals = []
    for gpu in sorted(found):
        values = found[gpu]
        xid = values.get(XID_SIGNAL)
        signals.append(
            GpuSignals(
                gpu,
                xid=int(xid) if xid is not None and xid > 0 else None,
                dbe_errors=int(values.get(DBE_SIGNAL, 0.0)),
                remap_failed=values.get(REMAP_SIGNAL, 0.0) > 0,
            )
        )
    return signals


async def read_health(
    prometheus: PrometheusClient,
    fatal_xids: Sequence[int],
    lookback_s: float,
    step_s: float,
) -> dict[GpuRef, Sickness]:
    """The sick GPUs now: one instant query, read and judged. Raises PrometheusQueryFailed."""
    query = health_query(fatal_xids, lookback_s, step_s, prometheus.labels)
    samples = await prometheus.query(query)
    return judge(gpu_signals(samples, prometheus.labels), fatal_xids)


def by_node(verdicts: Mapping[GpuRef, Sickness]) -> dict[str, dict[GpuRef, Sickness]]:
    """`verdicts` grouped by node, nodes and GPUs sorted."""
    grouped: dict[str, dict[GpuRef, Sickness]] = {}
    for gpu in sorted(verdicts):
        grouped.setdefault(gpu.node, {})[gpu] = verdicts[gpu]
    return grouped
