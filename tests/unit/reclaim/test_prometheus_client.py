"""The Prometheus client: typed errors, one request per attempt, and GpuWindow assembly.

A tiny aiohttp server on 127.0.0.1 stands in for Prometheus here, only to produce the answers
a real one rarely gives on demand (errors, slowness) and a canned vector whose every number is
known. The real Prometheus is exercised in tests/integration/test_prometheus_adapter.py.
"""

from __future__ import annotations

import asyncio
import math
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from reclaim.prometheus import (
    Correction,
    PrometheusClient,
    PrometheusError,
    PrometheusQueryFailed,
    PrometheusUnavailable,
    RangeSeries,
    Sample,
    assemble_windows,
    occupancy_corrections,
)
from reclaim.promql import SIGNAL_LABEL, LabelNames, holders_query, pod_matchers, usage_query
from reclaim.signals import GpuWindow
from reclaim.usage import DEFAULT_POWER_MODELS, Verdict, idle_verdict

SLOW_S = 1.0
WINDOW_S = 60.0


@dataclass
class StandIn:
    """The stand-in server: `answers` maps a query text to its JSON body; `seen` records the
    form of every request to the canned endpoint."""

    base: str
    answers: dict[str, dict[str, Any]] = field(default_factory=dict)
    seen: list[dict[str, str]] = field(default_factory=list)
    slow_ended: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when the slow endpoint's handler has finished (its task is gone)."""


@pytest.fixture(scope="module")
async def stand_in() -> AsyncIterator[StandIn]:
    app = web.Application()
    server = StandIn(base="")

    async def canned(request: web.Request) -> web.Response:
        form = {k: str(v) for k, v in (await request.post()).items()}
        server.seen.append(form)
        body = server.answers.get(form.get("query", ""))
        if body is None:
            return web.json_response({"status": "success", "data": _vector([])})
        return web.json_response(body)

    async def error_json(request: web.Request) -> web.Response:
        body = {"status": "error", "errorType": "execution", "error": "query too expensive"}
        return web.json_response(body, status=422)

    async def http_500(request: web.Request) -> web.Response:
        return web.Response(status=500, text="<html>internal proxy error</html>")

    async def slow(request: web.Request) -> web.Response:
        try:
            await asyncio.sleep(SLOW_S)
            return web.json_response({"status": "success", "data": _vector([])})
        finally:
            server.slow_ended.set()

    async def matrix(request: web.Request) -> web.Response:
        return web.json_response({"status": "success", "data": {"resultType": "matrix"}})

    async def not_json(request: web.Request) -> web.Response:
        return web.Response(text="hello")

    routes = {
        "canned": canned,
        "error": error_json,
        "http500": http_500,
        "slow": slow,
        "matrix": matrix,
        "notjson": not_json,
    }
    for prefix, handler in routes.items():
        app.router.add_route("*", f"/{prefix}/api/v1/query", handler)
    app.router.add_route("*", "/canned/api/v1/query_range", canned)
    runner = web.AppRunner(app, shutdown_timeout=SLOW_S * 2)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    server.base = f"http://{host}:{port}"
    try:
        yield server
    finally:
        await runner.cleanup()


def _vector(result: list[dict[str, Any]]) -> dict[str, Any]:
    return {"resultType": "vector", "result": result}


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def test_error_json_is_a_prometheus_error(stand_in: StandIn) -> None:
    async with PrometheusClient(f"{stand_in.base}/error") as client:
        with pytest.raises(PrometheusError) as caught:
            await client.query("up")
    error = caught.value
    assert (error.status, error.error_type, error.error) == (
        422,
        "execution",
        "query too expensive",
    )
    assert f"{stand_in.base}/error/api/v1/query" in str(error)
    assert error.reason == "error"
    assert isinstance(error, PrometheusQueryFailed)


async def test_http_500_is_a_prometheus_error(stand_in: StandIn) -> None:
    async with PrometheusClient(f"{stand_in.base}/http500/") as client:
        with pytest.raises(PrometheusError) as caught:
            await client.query("up")
    assert caught.value.status == 500
    assert "internal proxy error" in str(caught.value)
    assert f"{stand_in.base}/http500/api/v1/query" in str(caught.value)


@pytest.mark.parametrize("prefix", ["matrix", "notjson"])
async def test_answers_that_are_not_a_vector_are_errors(stand_in: StandIn, prefix: str) -> None:
    async with PrometheusClient(f"{stand_in.base}/{prefix}") as client:
        with pytest.raises(PrometheusError) as caught:
            await client.query("up")
    assert caught.value.error_type == "bad_response"


async def test_slow_answer_is_unavailable(stand_in: StandIn) -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    async with PrometheusClient(f"{stand_in.base}/slow", timeout_s=0.2) as client:
        with pytest.raises(PrometheusUnavailable) as caught:
            await client.query("up")
    assert loop.time() - started < SLOW_S
    assert "no answer within 0.2 s" in str(caught.value)
    assert caught.value.reason == "unavailable"
    await asyncio.wait_for(stand_in.slow_ended.wait(), SLOW_S * 5)  # its handler task ends


async def test_closed_port_is_unavailable() -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    async with PrometheusClient(url) as client:
        with pytest.raises(PrometheusUnavailable) as caught:
            await client.usage_windows([("ns", "pod")], WINDOW_S)
    assert f"{url}/api/v1/query" in str(caught.value)


async def test_credentials_stay_out_of_messages() -> None:
    client = PrometheusClient(f"http://user:secret@127.0.0.1:{closed_port()}")
    assert "secret" not in client.url
    with pytest.raises(PrometheusUnavailable) as caught:
        await client.query("up")
    await client.close()
    assert "secret" not in str(caught.value)


async def test_a_session_passed_in_is_used_and_left_open(stand_in: StandIn) -> None:
    async with aiohttp.ClientSession() as session:
        client = PrometheusClient(f"{stand_in.base}/canned", session=session)
        assert await client.query("up") == []
        await client.close()
        assert not session.closed


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="absolute"):
        PrometheusClient("localhost:9090")
    with pytest.raises(ValueError, match="timeout"):
        PrometheusClient("http://localhost:9090", timeout_s=0)


# The canned answer: pod ns1/a holds GPU 0 of n1 (shared with ns9/other, not a candidate) and
# GPU 1 (alone); ns1/b holds MIG instance 3 on GPU 7 of n2 (GR engine only, as on real MIG);
# ns2/a matches the batched selector's cross product but was not asked for; ns1/gone has no
# series at all.
A, B, GONE = ("ns1", "a"), ("ns1", "b"), ("ns1", "gone")
N1_GPU0 = {"Hostname": "n1", "gpu": "0", "modelName": "NVIDIA H200"}
N1_GPU1 = {"Hostname": "n1", "gpu": "1", "modelName": "NVIDIA H200"}
N2_MIG = {"Hostname": "n2", "gpu": "7", "GPU_I_ID": "3", "modelName": "NVIDIA H200"}


def element(signal: str, pod: tuple[str, str], gpu: dict[str, str], value: str) -> dict[str, Any]:
    metric = {SIGNAL_LABEL: signal, "namespace": pod[0], "pod": pod[1], **gpu}
    if signal == "holder":
        metric.pop("modelName", None)
    return {"metric": metric, "value": [1_700_000_000.5, value]}


CANNED = [
    element("util_count", A, N1_GPU0, "60"),
    element("util_sum", A, N1_GPU0, "1200"),
    element("power_count", A, N1_GPU0, "60"),
    element("power_sum", A, N1_GPU0, "12000"),
    element("energy_count", A, N1_GPU0, "60"),
    element("energy_increase", A, N1_GPU0, "11940000"),
    element("holder", A, N1_GPU0, "1"),
    element("holder", ("ns9", "other"), N1_GPU0, "1"),
    element("util_count", A, N1_GPU1, "58"),
    element("util_sum", A, N1_GPU1, "NaN"),  # not finite: util absent
    element("power_count", A, N1_GPU1, "58"),
    element("power_sum", A, N1_GPU1, "5800"),
    element("energy_count", A, N1_GPU1, "1"),  # one counter sample: no increase
    element("holder", A, N1_GPU1, "1"),
    element("engine_count", B, N2_MIG, "59"),
    element("engine_sum", B, N2_MIG, "2.95"),
    element("holder", B, N2_MIG, "1"),
    element("util_count", ("ns2", "a"), N1_GPU1, "60"),
    element("util_sum", ("ns2", "a"), N1_GPU1, "6000"),
]


async def test_usage_windows_from_one_batched_request(stand_in: StandIn) -> None:
    pods = [A, B, GONE, A]
    query = usage_query([A, B, GONE], WINDOW_S)
    stand_in.answers[query] = {"status": "success", "data": _vector(CANNED)}
    stand_in.seen.clear()
    async with PrometheusClient(f"{stand_in.base}/canned", timeout_s=2.5) as client:
        windows = await client.usage_windows(pods, WINDOW_S)
    assert stand_in.seen == [{"query": query, "timeout": "2.5"}]
    assert windows == {
        A: [
            GpuWindow(
                gpu="0",
                model="NVIDIA H200",
                window_s=WINDOW_S,
                util_samples=60,
                util_mean_pct=20.0,
                power_samples=60,
                power_mean_w=200.0,
                energy_samples=60,
                energy_increase_mj=11_940_000.0,
                sharing_pods=2,
                subwindow_s=WINDOW_S,
            ),
            GpuWindow(
                gpu="1",
                model="NVIDIA H200",
                window_s=WINDOW_S,
                power_samples=58,
                power_mean_w=100.0,
                subwindow_s=WINDOW_S,
            ),
        ],
        B: [
            GpuWindow(
                gpu="7",
                model="NVIDIA H200",
                window_s=WINDOW_S,
                engine_samples=59,
                engine_mean=2.95 / 59,
                mig_instance="3",
                subwindow_s=WINDOW_S,
            )
        ],
        GONE: [],
    }


async def test_no_pods_no_request(stand_in: StandIn) -> None:
    stand_in.seen.clear()
    async with PrometheusClient(f"{stand_in.base}/canned") as client:
        assert await client.usage_windows([], WINDOW_S) == {}
    assert stand_in.seen == []


async def test_exported_label_names(stand_in: StandIn) -> None:
    labels = LabelNames.exported()
    query = usage_query([A], WINDOW_S, labels)
    metric = {SIGNAL_LABEL: "util_count", "exported_namespace": "ns1", "exported_pod": "a"}
    metric |= {"namespace": "gpu-operator", "pod": "dcgm-exporter-x", **N1_GPU0}
    result = [
        {"metric": metric, "value": [1.0, "30"]},
        {"metric": {**metric, SIGNAL_LABEL: "util_sum"}, "value": [1.0, "300"]},
    ]
    stand_in.answers[query] = {"status": "success", "data": _vector(result)}
    async with PrometheusClient(f"{stand_in.base}/canned", label_names=labels) as client:
        windows = await client.usage_windows([A], WINDOW_S)
    assert [(w.gpu, w.util_samples, w.util_mean_pct) for w in windows[A]] == [("0", 30, 10.0)]


async def test_gpu_holders(stand_in: StandIn) -> None:
    rows = [("ns1", "a", "n1", "0"), ("ns9", "o", "n1", "0"), ("ns1", "a", "n1", "1")]
    rows.append(("ns1", "c", "n2", "x"))  # not a GPU index: ignored
    result = [
        {"metric": {"namespace": ns, "pod": pod, "Hostname": node, "gpu": gpu}, "value": [1, "1"]}
        for ns, pod, node, gpu in rows
    ]
    stand_in.answers[holders_query()] = {"status": "success", "data": _vector(result)}
    async with PrometheusClient(f"{stand_in.base}/canned") as client:
        holders = await client.gpu_holders()
    assert holders == {("n1", 0): {A, ("ns9", "o")}, ("n1", 1): {A}}


@pytest.mark.parametrize(
    ("holders", "recorded", "expected"),
    [
        pytest.param(
            {("n1", 0): {A}, ("n1", 1): {A}},
            {A: ("n1", (1, 0))},
            [],
            id="as recorded",
        ),
        pytest.param(
            {("n1", 2): {A}, ("n1", 3): {A}},
            {A: ("n1", (0, 1))},
            [Correction("ns1", "a", "n1", (2, 3), "n1", (0, 1))],
            id="other GPUs",
        ),
        pytest.param(
            {("n2", 0): {A}},
            {A: ("n1", (0,))},
            [Correction("ns1", "a", "n2", (0,), "n1", (0,))],
            id="other node",
        ),
        pytest.param(
            {("n1", 5): {B, A}},
            {A: ("n1", (5,))},
            [Correction("ns1", "b", "n1", (5,), None, None)],
            id="bound by another scheduler, sharing",
        ),
        pytest.param({}, {A: ("n1", (0,))}, [], id="no metrics yet proves nothing"),
        pytest.param(
            {("n1", 0): {A}, ("n2", 0): {A}},
            {A: ("n2", (1,))},
            [Correction("ns1", "a", "n2", (0,), "n2", (1,))],
            id="name reused: compared on the recorded node",
        ),
        pytest.param({("n1", 0): {A}, ("n2", 0): {A}}, {}, [], id="ambiguous, unrecorded"),
    ],
)
def test_occupancy_corrections(
    holders: dict[tuple[str, int], set[tuple[str, str]]],
    recorded: dict[tuple[str, str], tuple[str, tuple[int, ...]]],
    expected: list[Correction],
) -> None:
    assert occupancy_corrections(holders, recorded) == expected


def test_correction_kinds_and_text() -> None:
    moved = Correction("ns", "p", "n2", (2, 3), "n1", (0, 1))
    assert moved.kind == "other-node"
    assert moved.describe() == "ns/p holds GPUs 2,3 on n2 (recorded 0,1 on n1)"
    unrecorded = Correction("ns", "p", "n2", (2,), None, None)
    assert unrecorded.kind == "unrecorded"
    assert unrecorded.describe() == "ns/p holds GPUs 2 on n2 (no recorded choice)"
    assert Correction("ns", "p", "n1", (2,), "n1", (1,)).kind == "other-gpus"


# From Prometheus's answer to the verdict: what it says can make a pod busy; what it does not say
# (NaN, infinities, nothing, an error) never makes it idle.

HOUR_S = 3600.0
NOW = 1_700_000_000.5
QUIET_H200 = [  # 120 scrapes at 30 s of an idle holder's GPU, the energy counter included
    ("power_count", "120"),
    ("power_sum", str(120 * 118.0)),
    ("energy_count", "120"),
    ("energy_increase", str(118.0 * HOUR_S * 1000)),
    ("power_floor", "118"),
]


def answer(values: list[tuple[str, str]], pod: tuple[str, str] = A) -> list[dict[str, Any]]:
    return [element(signal, pod, N1_GPU0, value) for signal, value in values]


async def verdict_from(stand_in: StandIn, values: list[tuple[str, str]], **options: Any) -> Verdict:
    query = usage_query([A], HOUR_S, subwindow_s=300.0)
    stand_in.answers[query] = {"status": "success", "data": _vector(answer(values))}
    async with PrometheusClient(f"{stand_in.base}/canned") as client:
        windows = await client.usage_windows([A], HOUR_S, scrape_interval_s=30.0, **options)
    return idle_verdict(windows[A], 10.0, DEFAULT_POWER_MODELS, scrape_interval_s=30.0)


async def test_a_quiet_hour_is_idle(stand_in: StandIn) -> None:
    verdict = await verdict_from(stand_in, QUIET_H200)
    assert verdict.idle, verdict.reason


@pytest.mark.parametrize(
    "peak",
    [
        ("power_peak", "690"),  # busy at full power for the last 5 minutes
        ("energy_peak", str(690.0 * 1000)),  # mJ/s
        ("util_peak", "100"),
    ],
    ids=["power", "energy", "util"],
)
async def test_a_busy_subwindow_in_the_answer_makes_the_pod_busy(
    stand_in: StandIn, peak: tuple[str, str]
) -> None:
    verdict = await verdict_from(stand_in, [*QUIET_H200, peak])
    assert not verdict.idle
    assert verdict.usage_pct == pytest.approx(100.0)


async def test_the_power_floor_in_the_answer_calibrates_the_gpu(stand_in: StandIn) -> None:
    """This GPU idles at 148 W, 30 W above the model: 10 % duty draws 202 W, which the model's
    118 W would read as 14.7 %, and an idle 148 W as 5.2 %: with its floor it reads its duty."""
    busy = [
        ("power_count", "120"),
        ("power_sum", str(120 * 202.2)),
        ("power_floor", "148"),
    ]
    verdict = await verdict_from(stand_in, busy)
    assert not verdict.idle
    assert verdict.estimates["power"] == pytest.approx(100 * (202.2 - 143) / (690 - 143))
    idle = [("power_count", "120"), ("power_sum", str(120 * 148.0)), ("power_floor", "148")]
    assert (await verdict_from(stand_in, idle)).idle


@pytest.mark.parametrize("value", ["NaN", "+Inf", "-Inf"])
@pytest.mark.parametrize("signal", ["power_sum", "power_count", "energy_increase"])
async def test_non_finite_values_in_the_answer_are_missing(
    stand_in: StandIn, signal: str, value: str
) -> None:
    only_power = [("power_count", "120"), ("power_sum", str(120 * 118.0)), ("power_floor", "118")]
    only_energy = [
        ("energy_count", "120"),
        ("energy_increase", str(118.0 * HOUR_S * 1000)),
    ]
    values = only_energy if signal == "energy_increase" else only_power
    assert (await verdict_from(stand_in, values)).idle
    spoiled = [(s, value if s == signal else v) for s, v in values]
    verdict = await verdict_from(stand_in, spoiled)
    assert not verdict.idle
    assert "insufficient samples" in verdict.reason


@pytest.mark.parametrize("value", ["NaN", "+Inf", "-Inf"])
async def test_everything_nan_is_not_idle(stand_in: StandIn, value: str) -> None:
    verdict = await verdict_from(stand_in, [(signal, value) for signal, _ in QUIET_H200])
    assert not verdict.idle


async def test_no_data_is_not_idle(stand_in: StandIn) -> None:
    verdict = await verdict_from(stand_in, [])
    assert not verdict.idle
    assert verdict.reason == "no GPU samples for the pod"


@pytest.mark.parametrize("prefix", ["error", "http500", "matrix", "notjson"])
async def test_an_error_answer_yields_no_windows_at_all(stand_in: StandIn, prefix: str) -> None:
    async with PrometheusClient(f"{stand_in.base}/{prefix}") as client:
        with pytest.raises(PrometheusQueryFailed):
            await client.usage_windows([A], HOUR_S, scrape_interval_s=30.0)


async def test_a_pod_younger_than_the_window_is_not_idle(stand_in: StandIn) -> None:
    """The quiet hour may be a predecessor's with the same name: the pod started 10 minutes
    before the query was evaluated (the answer's timestamp)."""
    young = await verdict_from(stand_in, QUIET_H200, started_at={A: NOW - 600.0})
    assert not young.idle
    assert "started 600 s before the window's end" in young.reason
    old = await verdict_from(stand_in, QUIET_H200, started_at={A: NOW - HOUR_S - 1})
    assert old.idle


@pytest.mark.parametrize(("scrape_s", "subwindow"), [(30.0, "[300s]"), (15.0, "[150s]")])
async def test_the_subwindow_follows_the_scrape_interval(
    stand_in: StandIn, scrape_s: float, subwindow: str
) -> None:
    stand_in.seen.clear()
    async with PrometheusClient(f"{stand_in.base}/canned") as client:
        await client.usage_windows([A], HOUR_S, scrape_interval_s=scrape_s)
    assert len(stand_in.seen) == 1  # one request per window, peaks and floor included
    query = stand_in.seen[0]["query"]
    assert f"DCGM_FI_DEV_POWER_USAGE{{{pod_matchers([A])}}}{subwindow}" in query
    assert "[86400s]" in query


def _sample(found: dict[str, Any]) -> Sample:
    timestamp, value = found["value"]
    return Sample(labels=found["metric"], value=float(value), timestamp=float(timestamp))


def uid_element(signal: str, uid: str, value: str) -> dict[str, Any]:
    found = element(signal, A, N1_GPU0, value)
    found["metric"]["pod_uid"] = uid
    return found


def test_series_of_another_uid_are_a_predecessors() -> None:
    """With dcgm-exporter's --kubernetes-enable-pod-uid the predecessor's quiet hour carries its
    own UID: dropped; the new pod's 20 samples do not cover the hour."""
    old = [uid_element(s, "uid-old", v) for s, v in QUIET_H200]
    new = [
        uid_element("power_count", "uid-new", "20"),
        uid_element("power_sum", "uid-new", str(20 * 118.0)),
    ]
    samples = [_sample(e) for e in [*old, *new]]
    windows = assemble_windows(samples, [A], HOUR_S, uids={A: "uid-new"})
    (window,) = windows[A]
    assert (window.power_samples, window.energy_samples, window.power_floor_w) == (20, 0, None)
    verdict = idle_verdict(windows[A], 10.0, DEFAULT_POWER_MODELS, scrape_interval_s=30.0)
    assert not verdict.idle
    # Without the UID (or on series without the label) both pods' samples count together.
    merged = assemble_windows(samples, [A], HOUR_S)
    assert merged[A][0].power_samples == 140
    assert merged[A][0].power_floor_w == 118.0


def test_elements_of_two_uids_combine_like_one_series() -> None:
    values = [
        ("power_count", "60", "60"),
        ("power_sum", str(60 * 118.0), str(60 * 690.0)),
        ("power_peak", "118", "690"),
        ("power_floor", "117", "150"),
        ("energy_increase", "1000", "2000"),
        ("energy_count", "60", "60"),
    ]
    elements = [uid_element(s, "u1", a) for s, a, _ in values]
    elements += [uid_element(s, "u2", b) for s, _, b in values]
    (window,) = assemble_windows([_sample(e) for e in elements], [A], HOUR_S)[A]
    assert window.power_samples == 120
    assert window.power_mean_w == pytest.approx((118.0 + 690.0) / 2)
    assert (window.power_peak_w, window.power_floor_w) == (690.0, 117.0)
    assert (window.energy_increase_mj, window.energy_samples) == (3000.0, 120)
    # A NaN sum of one spoils the total, as it would in one PromQL sum: the signal is missing.
    spoiled = [*elements, uid_element("power_sum", "u3", "NaN")]
    (window,) = assemble_windows([_sample(e) for e in spoiled], [A], HOUR_S)[A]
    assert (window.power_samples, window.power_mean_w) == (0, None)
    assert window.power_peak_w == 690.0  # peaks only add caution: the finite ones stay


def _matrix(result: list[dict[str, Any]]) -> dict[str, Any]:
    return {"status": "success", "data": {"resultType": "matrix", "result": result}}


async def test_a_range_query_sends_the_window_and_parses_the_matrix(stand_in: StandIn) -> None:
    stand_in.answers["range_query"] = _matrix(
        [
            {"metric": {"namespace": "a"}, "values": [[100, "0.5"], [160.5, "NaN"]]},
            {"metric": {}, "values": []},
        ]
    )
    stand_in.seen.clear()
    async with PrometheusClient(f"{stand_in.base}/canned", timeout_s=3) as client:
        series = await client.query_range("range_query", 100.0, 160.5, 60)
    assert stand_in.seen == [
        {"query": "range_query", "start": "100.000", "end": "160.500", "step": "60", "timeout": "3"}
    ]
    first, empty = series
    assert first.labels == {"namespace": "a"}
    assert first.points[0] == (100.0, 0.5)
    assert first.points[1][0] == 160.5 and math.isnan(first.points[1][1])
    assert empty == RangeSeries(labels={}, points=())


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        ({"status": "success", "data": _vector([])}, "not a matrix"),
        (_matrix([{"metric": {}, "values": [[1, "x"]]}]), "malformed matrix"),
        (_matrix([{"metric": [], "values": []}]), "malformed matrix"),
        ({"status": "error", "errorType": "bad_data", "error": "bad step"}, "bad_data: bad step"),
    ],
)
async def test_a_range_query_refuses_anything_but_a_matrix(
    stand_in: StandIn, answer: dict[str, Any], words: str
) -> None:
    stand_in.answers["bad_range"] = answer
    async with PrometheusClient(f"{stand_in.base}/canned") as client:
        with pytest.raises(PrometheusError, match=words) as raised:
            await client.query_range("bad_range", 0, 60, 15)
    assert "/api/v1/query_range" in str(raised.value)  # the endpoint that answered
