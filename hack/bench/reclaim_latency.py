"""Reclaim latency: from a pending pod's creation to its binding, when an idle pod holds its GPUs.

    python -m hack.bench.reclaim_latency [--rounds 5] [--window-seconds 5] [-o json]

Starts the local cluster (with Prometheus and the fake dcgm-exporter scraping every second) and
the scheduler in this process with reclaim enforced. Each round: an idle 2-GPU pod (zero grace
period, a PriorityClass with a reclaim policy) runs on a 2-GPU node until Prometheus holds a full
idle window, then a 2-GPU preemptor is created; the round measures creation -> bound, and the
time the Eviction API call took. Prints median and p95 of both next to the cooldown and the
window, which bound what a user waits in practice.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from dataclasses import dataclass
from typing import Any, cast

from kubernetes_asyncio import client

from hack.localcluster import ClusterConfig, LocalCluster, NodeSpec, create_nodes
from hack.localcluster.cluster import free_port
from hack.localcluster.nodes import wait_nodes_ready
from scheduler.config import config_from_data
from scheduler.daemon import Daemon
from scheduler.kube.client import api_client_for

POLICY = "reclaim-idle-resource.scheduling.x-k8s.io/"
NODE = NodeSpec("bench-h", 1, gpus=2, nvlink_domains="0-1", gpu_product="NVIDIA-H200")


@dataclass(frozen=True)
class Round:
    create_to_bound_s: float
    eviction_call_s: float


def _pod(name: str, priority_class: str, scheduler: str, usage: str | None) -> Any:
    annotations = {"fake-dcgm.gpu-scheduler.io/usage": usage} if usage else {}
    return {
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "schedulerName": scheduler,
            "priorityClassName": priority_class,
            "terminationGracePeriodSeconds": 0,
            "nodeSelector": {"kubernetes.io/hostname": NODE.node_names()[0]},
            "containers": [
                {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "2"}}}
            ],
        },
    }


async def _wait(predicate: Any, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await predicate():
            return
        await asyncio.sleep(0.05)
    raise TimeoutError("benchmark round did not finish")


async def run(rounds: int, window_s: int) -> list[Round]:
    with LocalCluster(ClusterConfig(kube_scheduler=False)) as cluster:
        api = await api_client_for(str(cluster.kubeconfig))
        core = client.CoreV1Api(api)
        await wait_nodes_ready(core, await create_nodes(core, [NODE]))
        scheduling = client.SchedulingV1Api(api)
        await scheduling.create_priority_class(
            cast(
                Any,
                {
                    "metadata": {
                        "name": "bench-idle",
                        "annotations": {
                            POLICY + "minimum-preemptable-priority": "0",
                            POLICY + "toleration-seconds": "0",
                            POLICY + "resource-idle-seconds": str(window_s),
                            POLICY + "resource-idle-usage-threshold": "10",
                        },
                    },
                    "value": 100,
                },
            )
        )
        await scheduling.create_priority_class(
            cast(Any, {"metadata": {"name": "bench-high"}, "value": 1000})
        )
        settings = config_from_data(
            {
                "leaderElection": {"enabled": False},
                "metricsAddress": f"127.0.0.1:{free_port()}",
                "reclaim": {
                    "mode": "enforce",
                    "prometheusUrl": cluster.prometheus_url,
                    "scrapeIntervalSeconds": 1,
                    "cooldownSeconds": 1,
                },
                "queue": {"unschedulableFlushSeconds": 1},
            }
        )
        daemon = Daemon(settings, api)
        task = asyncio.create_task(daemon.run())
        results: list[Round] = []
        try:
            await _wait(lambda: asyncio.sleep(0, daemon.synced()))
            for index in range(rounds):
                victim = f"idle-{index}"
                await core.create_namespaced_pod(
                    "default", cast(Any, _pod(victim, "bench-idle", "elsewhere", "constant:util=0"))
                )
                await core.create_namespaced_pod_binding(
                    victim,
                    "default",
                    cast(
                        Any,
                        {
                            "metadata": {
                                "name": victim,
                                "annotations": {"gpu-scheduler.io/gpus": "0,1"},
                            },
                            "target": {"kind": "Node", "name": NODE.node_names()[0]},
                        },
                    ),
                    _preload_content=False,
                )
                await asyncio.sleep(window_s + 2)  # a full idle window in Prometheus
                created = time.monotonic()
                name = f"preemptor-{index}"
                await core.create_namespaced_pod(
                    "default", _pod(name, "bench-high", "gpu-scheduler", None)
                )

                async def bound(name: str = name) -> bool:
                    pod = await core.read_namespaced_pod(name, "default")
                    return bool(pod.spec.node_name)

                await _wait(bound)
                elapsed = time.monotonic() - created
                results.append(Round(elapsed, daemon.reclaimer.last_eviction_s))
                await core.delete_namespaced_pod(name, "default", grace_period_seconds=0)

                async def forgotten(name: str = name) -> bool:
                    return f"default/{name}" not in daemon.cache.pods

                await _wait(forgotten)
        finally:
            daemon.stop()
            await task
            await api.close()
        return results


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hack.bench.reclaim_latency")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--window-seconds", type=int, default=5)
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table")
    args = parser.parse_args(argv)
    rounds = asyncio.run(run(args.rounds, args.window_seconds))
    bound = [r.create_to_bound_s for r in rounds]
    evict = [r.eviction_call_s for r in rounds]
    summary = {
        "rounds": len(rounds),
        "create_to_bound_median_s": statistics.median(bound),
        "create_to_bound_p95_s": _p95(bound),
        "eviction_call_median_s": statistics.median(evict),
        "eviction_call_p95_s": _p95(evict),
        "window_s": args.window_seconds,
        "cooldown_s": 1.0,
        "scrape_interval_s": 1.0,
    }
    if args.output == "json":
        print(json.dumps(summary, indent=2))
    else:
        for key, value in summary.items():
            print(f"{key:28} {value:.3f}" if isinstance(value, float) else f"{key:28} {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
