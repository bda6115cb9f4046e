"""Prometheus adapter for reclaim: per-GPU usage windows and who really holds which GPU.

Role: the one module that talks to Prometheus (HTTP API, ``/api/v1/query`` instant queries and
``/api/v1/query_range`` range queries, JSON answers as documented at
prometheus.io/docs/prometheus/latest/querying/api/). It sends the
PromQL that `reclaim.promql` builds and turns the answers into `reclaim.signals.GpuWindow`s and
holder maps. Policy lives elsewhere: this module never decides that a pod is idle.

Fail-safe contract: every failure is a `PrometheusQueryFailed` (`PrometheusUnavailable` when no
answer came: connection refused or reset, timeout; `PrometheusError` when Prometheus or something
in front of it answered with an error). The caller skips reclaim on either. A pod that the answer
says nothing about gets an empty list of windows, which the verdict reads as "too few samples".

One reclaim attempt costs ONE HTTP request (`PrometheusClient.usage_windows`): the batched query
of `reclaim.promql.usage_query`, sent as a form-encoded POST so a long candidate list never meets
a URL length limit. Allocation tracking (`PrometheusClient.gpu_holders`) is a second, periodic
request, and `occupancy_corrections` is its pure diff against the scheduler's recorded choices.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import TracebackType
from typing import Any, ClassVar

import aiohttp
from yarl import URL

from reclaim.promql import (
    DEFAULT_LABELS,
    DEFAULT_SCRAPE_INTERVAL_S,
    SIGNAL_LABEL,
    LabelNames,
    Signal,
    holders_query,
    usage_query,
)
from reclaim.signals import GpuWindow, subwindow_length

__all__ = [
    "Correction",
    "LabelNames",
    "PodKey",
    "PrometheusClient",
    "PrometheusError",
    "PrometheusQueryFailed",
    "PrometheusUnavailable",
    "RangeSeries",
    "Sample",
    "assemble_windows",
    "occupancy_corrections",
]

PodKey = tuple[str, str]
"""(namespace, pod name)."""
GpuSlot = tuple[str, str, str | None]
"""(node, gpu index label, MIG GPU_I_ID or None for a whole GPU)."""
QUERY_PATH = "api/v1/query"
RANGE_QUERY_PATH = "api/v1/query_range"
_BODY_EXCERPT = 200


class PrometheusQueryFailed(Exception):
    """A query got no usable answer; reclaim must not evict on it.

    `url` is the endpoint asked (without credentials); `reason` is a short, stable word for
    counters and events ("unavailable", "error").
    """

    reason: ClassVar[str] = "failed"

    def __init__(self, url: str, message: str) -> None:
        super().__init__(f"Prometheus at {url}: {message}")
        self.url = url


class PrometheusUnavailable(PrometheusQueryFailed):
    """No answer: connection refused or reset, DNS failure, or no answer within the timeout."""

    reason: ClassVar[str] = "unavailable"


class PrometheusError(PrometheusQueryFailed):
    """An answer that is an error: HTTP status >= 400, ``"status": "error"``, or not the
    result type asked for (an instant vector, or a range query's matrix) in the documented JSON
    envelope (`error_type` "bad_response").

    `status` is the HTTP status; `error_type` and `error` are Prometheus's own ``errorType``
    and ``error`` when it sent them (e.g. "bad_data", "execution", "timeout").
    """

    reason: ClassVar[str] = "error"

    def __init__(self, url: str, status: int, error_type: str, error: str) -> None:
        super().__init__(url, f"HTTP {status}, {error_type}: {error}")
        self.status = status
        self.error_type = error_type
        self.error = error


@dataclass(frozen=True)
class Sample:
    """One element of an instant vector: its labels (``__name__`` included when kept), its
    value (NaN and infinities as Prometheus sent them) and its timestamp (epoch seconds)."""

    labels: Mapping[str, str]
    value: float
    timestamp: float


@dataclass(frozen=True)
class RangeSeries:
    """One series of a range query's matrix: its labels and its (timestamp, value) points in
    time order (epoch seconds; NaN and infinities as Prometheus sent them)."""

    labels: Mapping[str, str]
    points: tuple[tuple[float, float], ...]


@dataclass(frozen=True)
class Correction:
    """Where a pod really holds GPUs differs from what the scheduler recorded.

    `node` / `gpus` are what dcgm-exporter reports (sorted indices); `recorded_node` /
    `recorded_gpus` are the scheduler's choice, both None when it recorded none (a pod bound by
    another scheduler, or before the scheduler's cache learnt of it).
    """

    namespace: str
    pod: str
    node: str
    gpus: tuple[int, ...]
    recorded_node: str | None
    recorded_gpus: tuple[int, ...] | None

    @property
    def kind(self) -> str:
        """ "unrecorded", "other-node" or "other-gpus"."""
        if self.recorded_node is None:
            return "unrecorded"
        return "other-node" if self.recorded_node != self.node else "other-gpus"

    def describe(self) -> str:
        """One line for the log, e.g. ``ns/pod holds GPUs 2,3 on n1 (recorded 0,1 on n1)``."""
        held = f"{self.namespace}/{self.pod} holds GPUs {_indices(self.gpus)} on {self.node}"
        if self.recorded_node is None:
            return f"{held} (no recorded choice)"
        recorded = _indices(self.recorded_gpus or ())
        return f"{held} (recorded {recorded} on {self.recorded_node})"


def _indices(gpus: Sequence[int]) -> str:
    return ",".join(str(g) for g in gpus) or "none"


def occupancy_corrections(
    holders: Mapping[tuple[str, int], set[PodKey]],
    recorded: Mapping[PodKey, tuple[str, tuple[int, ...]]],
) -> list[Correction]:
    """The pods whose real GPUs (`holders`, from `PrometheusClient.gpu_holders`) differ from the
    scheduler's `recorded` (node, GPU indices), and the pods it recorded nothing for.

    Pure. A recorded pod missing from `holders` is not a correction: metrics lag behind binding
    (the exporter has not listed it yet, or Prometheus has not scraped it), so absence proves
    nothing. A pod reported on several nodes (a name reused within the lookback window) is
    compared on its recorded node when it is one of them, and skipped as ambiguous otherwise.
    Sorted by (namespace, pod).
    """
    actual: dict[PodKey, dict[str, set[int]]] = defaultdict(lambda: defaultdict(set))
    for (node, gpu), pods in holders.items():
        for pod in pods:
            actual[pod][node].add(gpu)
    corrections: list[Correction] = []
    for pod, by_node in sorted(actual.items()):
        choice = recorded.get(pod)
        if choice is not None and choice[0] in by_node:
            node = choice[0]
        elif len(by_node) == 1:
            node = next(iter(by_node))
        else:
            continue
        gpus = tuple(sorted(by_node[node]))
        if choice is not None and (choice[0], tuple(sorted(choice[1]))) == (node, gpus):
            continue
        corrections.append(
            Correction(
                namespace=pod[0],
                pod=pod[1],
                node=node,
                gpus=gpus,
                recorded_node=choice[0] if choice else None,
                recorded_gpus=tuple(sorted(choice[1])) if choice else None,
            )
        )
    return corrections


class PrometheusClient:
    """Instant queries against one Prometheus, with a timeout and typed errors.

    `base_url` is where Prometheus serves its UI and API (a path prefix such as
    ``http://host/prometheus`` is kept). A `session` passed in stays the caller's to close;
    otherwise the client makes one on first use and closes it in `close` (or ``async with``).
    `timeout_s` bounds each request end to end and is also sent as the query's ``timeout``
    parameter, so Prometheus stops evaluating when nobody waits any more.
    """

    def __init__(
        self,
        base_url: str,
        session: aiohttp.ClientSession | None = None,
        timeout_s: float = 5.0,
        label_names: LabelNames = DEFAULT_LABELS,
    ) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s!r}")
        base = URL(base_url)
        if not base.is_absolute():
            raise ValueError(
                f"Prometheus URL must be absolute (http://host:port), got {base_url!r}"
            )
        self._endpoint = base.with_path(base.path.rstrip("/") + "/" + QUERY_PATH)
        self._range_endpoint = base.with_path(base.path.rstrip("/") + "/" + RANGE_QUERY_PATH)
        self.url = str(self._endpoint.with_user(None))
        """The instant-query endpoint without credentials, as errors name it."""
        self.range_url = str(self._range_endpoint.with_user(None))
        """The range-query endpoint without credentials, as errors of `query_range` name it."""
        """The query endpoint, without credentials; errors name it."""
        self._session = session
        self._owns_session = session is None
        self.timeout_s = timeout_s
        self.labels = label_names
        self.trace_configs: list[aiohttp.TraceConfig] = []  # set before the first query

    async def __aenter__(self) -> PrometheusClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the session if this client made it."""
        if self._owns_session and self._session is not None:
            await self._session.close()
            self._session = None

    async def query(self, promql: str) -> list[Sample]:
        """Evaluate `promql` now as an instant query; its result must be an instant vector.

        Raises PrometheusUnavailable (no answer within `timeout_s`, connection failed) or
        PrometheusError (HTTP >= 400, ``"status": "error"``, anything but a vector).
        """
        status, text = await self._post(self._endpoint, self.url, {"query": promql})
        return self._vector(status, text)

    async def query_range(
        self, promql: str, start: float, end: float, step_s: float
    ) -> list[RangeSeries]:
        """Evaluate `promql` at `start`, `start + step_s`, ... up to `end` (epoch seconds); its
        result must be a matrix. Raises as `query` does (PrometheusError for anything but a
        matrix, or a malformed point)."""
        form = {
            "query": promql,
            "start": f"{start:.3f}",
            "end": f"{end:.3f}",
            "step": f"{step_s:g}",
        }
        status, text = await self._post(self._range_endpoint, self.range_url, form)
        try:
            matrix = self._result(status, text, "matrix", self.range_url)
            return [_range_series(element) for element in matrix]
        except (KeyError, IndexError, TypeError, ValueError, OverflowError) as error:
            raise PrometheusError(
                self.range_url,
                status,
                "bad_response",
                f"malformed matrix ({_excerpt(repr(error))})",
            ) from error

    async def _post(self, endpoint: URL, where: str, form: Mapping[str, str]) -> tuple[int, str]:
        """POST `form` (and the query timeout) to `endpoint`: (HTTP status, body text); errors
        name `where` (the endpoint without credentials)."""
        if self._session is None:
            self._session = aiohttp.ClientSession(trace_configs=self.trace_configs)
        form = {**form, "timeout": f"{self.timeout_s:g}"}  # seconds, as a float
        timeout = aiohttp.ClientTimeout(total=self.timeout_s)
        try:
            async with self._session.post(endpoint, data=form, timeout=timeout) as response:
                status = response.status
                text = await response.text(errors="replace")
        except TimeoutError as error:
            raise PrometheusUnavailable(where, f"no answer within {self.timeout_s:g} s") from error
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as error:
            raise PrometheusUnavailable(where, f"connection failed: {error}") from error
        except aiohttp.ClientError as error:
            raise PrometheusError(where, 0, "client_error", str(error)) from error
        return status, text

    def _vector(self, status: int, text: str) -> list[Sample]:
        try:
            return [_sample(element) for element in self._result(status, text, "vector", self.url)]
        except (KeyError, IndexError, TypeError, ValueError, OverflowError) as error:
            raise PrometheusError(
                self.url,
                status,
                "bad_response",
                f"malformed vector element ({_excerpt(repr(error))})",
            ) from error

    def _result(self, status: int, text: str, result_type: str, where: str) -> list[Any]:
        """The `result` list of a successful answer of `result_type` ("vector" or "matrix");
        PrometheusError naming `where` for an error answer or any other shape."""
        body = _json_object(text)
        if body is not None and body.get("status") == "error":
            raise PrometheusError(
                where,
                status,
                _excerpt(str(body.get("errorType") or "unknown")),
                _excerpt(str(body.get("error") or "")),
            )
        if status >= 400 or body is None:
            raise PrometheusError(where, status, "bad_response", _excerpt(text))
        data = body.get("data")
        if body.get("status") != "success" or not isinstance(data, dict):
            raise PrometheusError(where, status, "bad_response", _excerpt(text))
        result = data.get("result")
        if data.get("resultType") != result_type or not isinstance(result, list):
            expected = "an instant vector" if result_type == "vector" else f"a {result_type}"
            raise PrometheusError(
                where, status, "bad_response", f"not {expected}: {_excerpt(text)}"
            )
        return result

    async def usage_windows(
        self,
        pods: Sequence[PodKey],
        window_s: float,
        *,
        scrape_interval_s: float | None = None,
        started_at: Mapping[PodKey, float] | None = None,
        uids: Mapping[PodKey, str] | None = None,
    ) -> dict[PodKey, list[GpuWindow]]:
        """Per requested pod, one `GpuWindow` per GPU (or MIG instance) it held in the last
        `window_s` seconds, sorted by node, GPU index and instance; [] when the answer holds
        nothing about the pod. One HTTP request; no request at all for no pods.

        `scrape_interval_s` (default `DEFAULT_SCRAPE_INTERVAL_S`, dcgm-exporter's 30 s) sizes the
        sub-windows of the peaks (`reclaim.signals.subwindow_length`); pass the interval the
        verdict is given. `started_at` maps a pod to its start (epoch seconds: when it was
        scheduled, or created); such a pod gets `history_s`, the time from its start to the
        query's evaluation, so a pod younger than the window is never judged on samples that a
        predecessor with the same namespace and name left in it. `uids` maps a pod to its UID:
        where the series carry a pod UID label (`LabelNames.pod_uid`), series of any other UID
        are left out. `sharing_pods` counts the distinct pods seen on the same node, GPU and
        instance in the window, candidates or not (the batched query's holder part). Raises
        PrometheusQueryFailed; ValueError for an empty namespace or pod name or a bad interval.
        """
        wanted = list(dict.fromkeys(pods))
        if not wanted:
            return {}
        interval = DEFAULT_SCRAPE_INTERVAL_S if scrape_interval_s is None else scrape_interval_s
        subwindow_s = subwindow_length(window_s, interval)
        query = usage_query(wanted, window_s, self.labels, subwindow_s=subwindow_s)
        samples = await self.query(query)
        return assemble_windows(
            samples,
            wanted,
            window_s,
            self.labels,
            subwindow_s=subwindow_s,
            started_at=started_at,
            uids=uids,
        )

    async def gpu_holders(self) -> dict[tuple[str, int], set[PodKey]]:
        """Who holds each whole GPU now, by (node, GPU index), from the latest samples of
        ``DCGM_FI_DEV_GPU_UTIL`` that carry pod labels (see `reclaim.promql.holders_query`).

        GPUs nobody holds are absent; series whose GPU label is not an integer are ignored.
        Raises PrometheusQueryFailed.
        """
        labels = self.labels
        holders: dict[tuple[str, int], set[PodKey]] = defaultdict(set)
        for sample in await self.query(holders_query(labels)):
            gpu = sample.labels.get(labels.gpu, "")
            if not gpu.isdigit():
                continue
            node = sample.labels.get(labels.node, "")
            pod = (sample.labels.get(labels.namespace, ""), sample.labels.get(labels.pod, ""))
            holders[(node, int(gpu))].add(pod)
        return dict(holders)


@dataclass
class _Slot:
    """What the answer says about one GPU of one pod: model and the value of each signal."""

    model: str = ""
    values: dict[Signal, float] = field(default_factory=dict)
    spoiled: set[Signal] = field(default_factory=set)
    """Signals with a non-finite element: absent, whatever the other elements say."""


def assemble_windows(
    samples: Sequence[Sample],
    pods: Sequence[PodKey],
    window_s: float,
    labels: LabelNames = DEFAULT_LABELS,
    *,
    subwindow_s: float | None = None,
    started_at: Mapping[PodKey, float] | None = None,
    uids: Mapping[PodKey, str] | None = None,
) -> dict[PodKey, list[GpuWindow]]:
    """Turn the answer to `reclaim.promql.usage_query` into windows per pod of `pods`. Pure.

    Elements for pods not in `pods` (the selector's cross product) are dropped. A signal whose
    sum, increase, peak or floor is missing or not finite (NaN, an infinity) counts as absent
    (0 samples, None), as does one with no samples; a mean is its sum over its sample count.
    `subwindow_s` is recorded in each window. A pod in `started_at` gets `history_s`: the
    answer's evaluation time (its latest sample timestamp) less the pod's start. An element
    whose pod UID label differs from the pod's UID in `uids` is a predecessor's and is dropped;
    elements of several UIDs for one GPU (no UID given) are combined as one series would be:
    sums, counts and increases added, peaks the highest, floors the lowest.
    """
    wanted = set(pods)
    known_uids = {pod: uid for pod, uid in (uids or {}).items() if uid}
    slots: dict[PodKey, dict[GpuSlot, _Slot]] = {pod: {} for pod in pods}
    holders: dict[GpuSlot, set[PodKey]] = defaultdict(set)
    for sample in samples:
        try:
            signal = Signal(sample.labels.get(SIGNAL_LABEL, ""))
        except ValueError:
            continue
        pod = (sample.labels.get(labels.namespace, ""), sample.labels.get(labels.pod, ""))
        slot_key: GpuSlot = (
            sample.labels.get(labels.node, ""),
            sample.labels.get(labels.gpu, ""),
            sample.labels.get(labels.gpu_instance) or None,
        )
        if signal is Signal.HOLDER:
            holders[slot_key].add(pod)
            continue
        if pod not in wanted:
            continue
        uid = sample.labels.get(labels.pod_uid, "")
        if uid and known_uids.get(pod, uid) != uid:
            continue  # a predecessor with the same namespace and name
        slot = slots[pod].setdefault(slot_key, _Slot())
        slot.model = slot.model or sample.labels.get(labels.model, "")
        if math.isfinite(sample.value):
            slot.values[signal] = _combine(signal, slot.values.get(signal), sample.value)
        elif signal not in _HIGHEST and signal is not Signal.POWER_FLOOR:
            slot.spoiled.add(signal)  # a NaN sum spoils the total, as in one PromQL sum
    evaluated = max((sample.timestamp for sample in samples), default=math.nan)
    starts = started_at or {}

    def history(pod: PodKey) -> float | None:
        start = starts.get(pod)
        return None if start is None else evaluated - start

    return {
        pod: [
            replace(
                _window(key, slot, window_s, len(holders.get(key, set()) | {pod})),
                subwindow_s=subwindow_s,
                history_s=history(pod),
            )
            for key, slot in sorted(by_gpu.items(), key=lambda item: _slot_order(item[0]))
        ]
        for pod, by_gpu in slots.items()
    }


_HIGHEST = frozenset({Signal.UTIL_PEAK, Signal.POWER_PEAK, Signal.ENGINE_PEAK, Signal.ENERGY_PEAK})


def _combine(signal: Signal, old: float | None, new: float) -> float:
    """Two elements of one signal for one GPU (series of two pod UIDs) as one series."""
    if old is None:
        return new
    if signal in _HIGHEST:
        return max(old, new)
    if signal is Signal.POWER_FLOOR:
        return min(old, new)
    return old + new


def _slot_order(key: GpuSlot) -> tuple[str, int, str, int, str]:
    node, gpu, instance = key
    gpu_number = int(gpu) if gpu.isdigit() else -1
    instance_number = int(instance) if instance and instance.isdigit() else -1
    return (node, gpu_number, gpu, instance_number, instance or "")


def _mean(values: Mapping[Signal, float], count: Signal, total: Signal) -> tuple[int, float | None]:
    samples = int(values.get(count, 0))
    if samples <= 0 or total not in values:
        return 0, None
    return samples, values[total] / samples


def _window(key: GpuSlot, slot: _Slot, window_s: float, sharing: int) -> GpuWindow:
    values = {signal: v for signal, v in slot.values.items() if signal not in slot.spoiled}
    util_samples, util_mean = _mean(values, Signal.UTIL_COUNT, Signal.UTIL_SUM)
    power_samples, power_mean = _mean(values, Signal.POWER_COUNT, Signal.POWER_SUM)
    engine_samples, engine_mean = _mean(values, Signal.ENGINE_COUNT, Signal.ENGINE_SUM)
    energy = values.get(Signal.ENERGY_INCREASE)
    energy_samples = int(values.get(Signal.ENERGY_COUNT, 0)) if energy is not None else 0
    energy_rate = values.get(Signal.ENERGY_PEAK)  # mJ/s
    return GpuWindow(
        gpu=key[1],
        model=slot.model,
        window_s=window_s,
        util_samples=util_samples,
        util_mean_pct=util_mean,
        power_samples=power_samples,
        power_mean_w=power_mean,
        energy_samples=energy_samples,
        energy_increase_mj=energy if energy_samples > 0 else None,
        engine_samples=engine_samples,
        engine_mean=engine_mean,
        mig_instance=key[2],
        sharing_pods=sharing,
        util_peak_pct=values.get(Signal.UTIL_PEAK),
        power_peak_w=values.get(Signal.POWER_PEAK),
        energy_peak_w=None if energy_rate is None else energy_rate / 1000.0,
        engine_peak=values.get(Signal.ENGINE_PEAK),
        power_floor_w=values.get(Signal.POWER_FLOOR),
    )


def _json_object(text: str) -> dict[str, Any] | None:
    try:
        body = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: nesting deeper than the parser goes
        return None
    return body if isinstance(body, dict) else None


def _excerpt(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _BODY_EXCERPT else flat[:_BODY_EXCERPT] + "..."


def _sample(element: Mapping[str, Any]) -> Sample:
    metric = element["metric"]
    timestamp, value = element["value"]
    if not isinstance(metric, dict):
        raise TypeError(f"metric is {type(metric).__name__}, not an object")
    return Sample(
        labels={str(k): str(v) for k, v in metric.items()},
        value=float(value),
        timestamp=float(timestamp),
    )


def _range_series(element: Mapping[str, Any]) -> RangeSeries:
    metric = element["metric"]
    if not isinstance(metric, dict):
        raise TypeError(f"metric is {type(metric).__name__}, not an object")
    points = tuple((float(t), float(v)) for t, v in element["values"])
    return RangeSeries(labels={str(k): str(v) for k, v in metric.items()}, points=points)
