"""`gpu-scheduler idle-report --plot` against the real cluster's Prometheus: the busy share per
namespace over time, read with range queries over the counters of a running daemon.

Two namespaces on one 8-GPU node: `steady` holds a pod at 100 % and one at 0 % (a busy share of
one half all along); `waves` holds a pod busy for 30 s, idle for 30 s (its share swings between
0 and 1). The cluster's Prometheus scrapes the daemon's /metrics for the test (a scrape job
added to its configuration, reloaded with SIGHUP, removed afterwards). The command reads the
daemon's accounting period and scrape interval from `--config`, as an operator passes the
scheduler's configuration, so its rates span two 5 s periods. With `GPU_SCHEDULER_FIGURE_DIR`
set, the command's figure is written there (docs/figures).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import statistics
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client

from hack.localcluster import LocalCluster
from scheduler.tools.idle_report import busy_share_plot
from scheduler.tools.plots import BUSY_SHARE_SIZE
from tests.figures import MAX_FIGURE_BYTES, png_size
from tests.integration.test_busy_time import NODE, cli, holder
from tests.kube import eventually, make_namespace
from tests.scheduling import isolated, make_nodes, running_daemon, settings_for

PERIOD_S = 5
"""accounting.periodSeconds: short, so the share moves within the waves' 30 s halves."""
WAVE = "periodic:period=60,duty=0.5,level=100"
HISTORY_S = 100
"""Seconds of scraped counters before the plot is drawn: more than one whole wave."""
WINDOW_S = 150
"""--plot-window: the whole history and the minute before the daemon started."""
FIGURE_DIR_ENV = "GPU_SCHEDULER_FIGURE_DIR"
FIGURE_NAME = "idle-report-busy-share.png"


SETTLED_S = 3 * PERIOD_S
"""From this long after a namespace's first point, its share is that of whole periods."""


@pytest.fixture
async def workloads(core_api: client.CoreV1Api) -> AsyncIterator[tuple[str, str]]:
    """The namespaces `steady` and `waves` (named so in the figure), deleted afterwards."""
    names = (await make_namespace(core_api, "steady"), await make_namespace(core_api, "waves"))
    yield names
    for name in names:
        await core_api.delete_namespace(name)


def query(prometheus_url: str, expression: str) -> list[dict[str, Any]]:
    url = f"{prometheus_url}/api/v1/query?" + urllib.parse.urlencode({"query": expression})
    with urllib.request.urlopen(url, timeout=5) as response:
        result: list[dict[str, Any]] = json.loads(response.read())["data"]["result"]
    return result


@contextmanager
def scraping(cluster: LocalCluster, job: str, target: str) -> Iterator[None]:
    """The cluster's Prometheus scrapes `target` (plain HTTP, every second) as `job` inside the
    block; its configuration is put back afterwards."""
    path = cluster.work_dir / "prometheus.yml"
    original = path.read_text()
    settings = yaml.safe_load(original)
    scrape = {"job_name": job, "scrape_interval": "1s", "scrape_timeout": "1s"}
    settings["scrape_configs"].append({**scrape, "static_configs": [{"targets": [target]}]})
    [prometheus] = [c for c in cluster.processes.components if c.name == "prometheus"]
    path.write_text(yaml.safe_dump(settings, sort_keys=False))
    prometheus.process.send_signal(signal.SIGHUP)  # reload its configuration
    try:
        yield
    finally:
        path.write_text(original)
        prometheus.process.send_signal(signal.SIGHUP)


async def test_busy_share_per_namespace_over_time(
    cluster: LocalCluster,
    core_api: client.CoreV1Api,
    namespace: str,
    workloads: tuple[str, str],
    tmp_path: Path,
) -> None:
    assert cluster.prometheus_url is not None
    url = cluster.prometheus_url
    steady_ns, waves_ns = workloads
    (node,) = await make_nodes(core_api, [isolated(NODE, namespace)])
    await holder(core_api, steady_ns, "full", node, "", "constant:util=100", (0, 1))
    await holder(core_api, steady_ns, "idle", node, "", "constant:util=0", (2, 3))
    await holder(core_api, waves_ns, "wave", node, "", WAVE, (4, 5))
    accounting = {"periodSeconds": PERIOD_S, "idleWindowSeconds": 15}
    reclaim = {"prometheusUrl": url, "scrapeIntervalSeconds": 1}
    settings = settings_for(namespace, reclaim=reclaim, accounting=accounting)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"accounting": accounting, "reclaim": reclaim}))
    job = f"gpu-scheduler-{namespace}"[:60]
    target = f"127.0.0.1:{settings.metrics_port}"
    async with running_daemon(cluster, settings), asyncio.timeout(HISTORY_S + 180):
        with scraping(cluster, job, target):

            async def counted() -> bool:
                found = query(url, f'gpu_scheduler_gpu_busy_seconds_total{{job="{job}"}}')
                return set(workloads) <= {s["metric"]["namespace"] for s in found}

            await eventually(counted, timeout=PERIOD_S * 6, what="both namespaces scraped")
            await asyncio.sleep(HISTORY_S)  # let the counters build a history to draw
            path = tmp_path / "busy.png"
            drawn = await busy_share_plot(settings, url, path, WINDOW_S)
            figure = Path(os.environ.get(FIGURE_DIR_ENV) or tmp_path) / FIGURE_NAME
            kubeconfig = str(cluster.kubeconfig)
            code, out, err = await cli(
                *("--prometheus-url", url),
                *("--kubeconfig", kubeconfig, "--config", str(config), "-o", "json"),
                *("--plot", str(figure), "--plot-window", str(WINDOW_S)),
            )

    assert png_size(path) == BUSY_SHARE_SIZE and path.stat().st_size <= MAX_FIGURE_BYTES
    assert (code, err) == (0, "")
    json.loads(out)  # the report is printed as usual beside the figure
    assert png_size(figure) == BUSY_SHARE_SIZE and figure.stat().st_size <= MAX_FIGURE_BYTES

    histories = {h.namespace: h for h in drawn if h.namespace in workloads}
    assert set(histories) == set(workloads)
    for history in histories.values():
        assert list(history.timestamps) == sorted(set(history.timestamps))
        assert len(history.timestamps) >= HISTORY_S // 2  # one point a second, where measured
        assert all(0.0 <= share <= 1.0 + 1e-9 for share in history.busy_share)
    steady, wave = histories[steady_ns], histories[waves_ns]
    print(
        f"\nsteady: share {min(steady.busy_share):.3f}..{max(steady.busy_share):.3f}, "
        f"{statistics.mean(steady.measured_gpus):.2f} GPUs; waves: share "
        f"{min(wave.busy_share):.3f}..{max(wave.busy_share):.3f}, "
        f"{statistics.mean(wave.measured_gpus):.2f} GPUs, {len(wave.timestamps)} points; "
        f"steady's first points: {[round(s, 3) for s in steady.busy_share[:12]]}"
    )
    # busy and measured time grow at the same accounting instants, so a range's share is that
    # of its periods: about one half all along, closer once the first periods are behind
    settled = [
        share
        for when, share in zip(steady.timestamps, steady.busy_share, strict=True)
        if when >= steady.timestamps[0] + SETTLED_S
    ]
    assert all(share == pytest.approx(0.5, abs=0.06) for share in steady.busy_share)
    assert settled and all(share == pytest.approx(0.5, abs=0.02) for share in settled)
    assert statistics.mean(steady.measured_gpus) == pytest.approx(4.0, rel=0.25)
    assert statistics.mean(wave.measured_gpus) == pytest.approx(2.0, rel=0.25)
    assert max(wave.busy_share) > 0.8 and min(wave.busy_share) < 0.2  # it swings
