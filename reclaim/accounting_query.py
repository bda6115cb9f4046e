"""The accounting's one Prometheus query per period: the period's window means and the idle window.

One instant query (one HTTP request, `PrometheusClient.query`) covers every holder: the `or` of

- the period window's sums and counts per signal (`reclaim.promql.usage_queries` over
  `period_s`, without peaks: the accounting integrates means), marked ``period/<signal>``;
- the whole idle-window query that reclaim sends (`usage_queries` over `idle_window_s`, peaks,
  power floor and holders included), marked ``idle/<signal>``.

The power floor (24 h lookback, per GPU) is asked once, in the idle part, and copied into the
period part: it calibrates the power duty of both. `split_answer` undoes the markers so that
`reclaim.prometheus.assemble_windows` reads each part as it reads reclaim's own answer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from reclaim.accounting import Holder, PodKey
from reclaim.prometheus import PrometheusClient, Sample, assemble_windows
from reclaim.promql import SIGNAL_LABEL, LabelNames, Signal, batch, usage_queries
from reclaim.signals import GpuWindow, subwindow_length

PERIOD = "period"
IDLE = "idle"
_SEPARATOR = "/"
PERIOD_SIGNALS = (
    Signal.UTIL_COUNT,
    Signal.UTIL_SUM,
    Signal.POWER_COUNT,
    Signal.POWER_SUM,
    Signal.ENGINE_COUNT,
    Signal.ENGINE_SUM,
    Signal.ENERGY_COUNT,
    Signal.ENERGY_INCREASE,
)
"""What the period part asks: window sums and counts, and the energy counter's increase."""


def accounting_query(
    pods: Sequence[PodKey],
    period_s: float,
    idle_window_s: float,
    labels: LabelNames,
    scrape_interval_s: float,
) -> str:
    """The single PromQL expression of one period for `pods` (non-empty, no empty names:
    ValueError otherwise, as `reclaim.promql.usage_queries`)."""
    period = usage_queries(pods, period_s, labels)
    idle = usage_queries(
        pods, idle_window_s, labels, subwindow_s=subwindow_length(idle_window_s, scrape_interval_s)
    )
    parts = {f"{PERIOD}{_SEPARATOR}{signal}": period[signal] for signal in PERIOD_SIGNALS}
    parts.update({f"{IDLE}{_SEPARATOR}{signal}": text for signal, text in idle.items()})
    return batch(parts)


def split_answer(samples: Sequence[Sample]) -> tuple[list[Sample], list[Sample]]:
    """(period part, idle part) of the answer, each element's marker back to its bare signal
    name; the idle part's power floor is copied into the period part. Unmarked or foreign
    elements are dropped."""
    period: list[Sample] = []
    idle: list[Sample] = []
    for sample in samples:
        part, _, signal = sample.labels.get(SIGNAL_LABEL, "").partition(_SEPARATOR)
        if part not in (PERIOD, IDLE) or not signal:
            continue
        bare = Sample({**sample.labels, SIGNAL_LABEL: signal}, sample.value, sample.timestamp)
        if part == IDLE:
            idle.append(bare)
            if signal == Signal.POWER_FLOOR:
                period.append(bare)
        else:
            period.append(bare)
    return period, idle


@dataclass(frozen=True)
class Windows:
    """Per holder, its GPU windows over the period and over the idle window."""

    period: Mapping[PodKey, list[GpuWindow]]
    idle: Mapping[PodKey, list[GpuWindow]]


async def measure_holders(
    prometheus: PrometheusClient,
    holders: Sequence[Holder],
    period_s: float,
    idle_window_s: float,
    scrape_interval_s: float,
) -> Windows:
    """One request for every holder (none for no holders). Raises
    `reclaim.prometheus.PrometheusQueryFailed` like every query of the adapter."""
    pods = list(dict.fromkeys(h.key for h in holders))
    if not pods:
        return Windows({}, {})
    labels = prometheus.labels
    text = accounting_query(pods, period_s, idle_window_s, labels, scrape_interval_s)
    period, idle = split_answer(await prometheus.query(text))
    uids = {h.key: h.uid for h in holders}
    started = {h.key: h.started_at for h in holders if h.started_at is not None}
    return Windows(
        period=assemble_windows(period, pods, period_s, labels, uids=uids),
        idle=assemble_windows(
            idle,
            pods,
            idle_window_s,
            labels,
            subwindow_s=subwindow_length(idle_window_s, scrape_interval_s),
            started_at=started,
            uids=uids,
        ),
    )
