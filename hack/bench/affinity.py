"""CPU per pod of InterPodAffinity and PodTopologySpread: count tables against the plain walk.

    python -m hack.bench.affinity [--nodes 1000] [--pods 1500] [--seed 0] [-o json]

The cluster state of the control-plane benchmark's feature mix (`hack.bench.control_plane
--features`): `--nodes` nodes of the three seed types in equal shares, and the seeded pod set of
`feature_kinds` / `with_features` (30 % plain, 15 % preferred and 15 % required pod affinity to
their group, 20 % topology spread over their group, 20 % gang members; topology key the node
type), placed one after the other as a burst would place them. Two caches hold the same pods:
one keeps the count tables (`scheduler.state.pod_counts`) and is read by the daemon's plugins,
the other keeps none and is read by their walked twins (`scheduler.plugins.pod_walk`), which
visit every counted pod, as the plugins did before the tables.

For each pod, in this process, CPU time (`time.process_time_ns`) of:
- plugins: both plugins' filter and score (score over the nodes their filters pass), new then
  walked, the order alternating from pod to pod;
- evaluate: the daemon's whole profile (`Framework.evaluate`) on each cache, the walked profile
  with the two plugins replaced by their twins; the new profile's choice places the pod;
- event: adding the placed pod to each cache (the count tables' upkeep is in the new figure).

The verdicts must agree: the benchmark counts pods whose rejections, scores or chosen node differ
between the two (0 expected). Figures are means over all pods (CPU per pod, as the control-plane
benchmark reports it) and the ratio new/walked, measured side by side in one run.
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from hack.bench.control_plane_model import node_specs, pod_manifest, pod_name, pod_sizes
from hack.bench.feature_workload import feature_kinds, with_features
from hack.localcluster.nodes import node_manifest
from scheduler.config import SchedulerConfig
from scheduler.core.profile import default_framework
from scheduler.framework.interface import CycleState, FilterPlugin, ScorePlugin
from scheduler.framework.runtime import Framework
from scheduler.framework.snapshot import Snapshot
from scheduler.model.objects import PodInfo, parse_node, parse_pod
from scheduler.plugins.inter_pod_affinity import InterPodAffinity
from scheduler.plugins.pod_walk import WalkedInterPodAffinity, WalkedPodTopologySpread
from scheduler.plugins.topology_spread import PodTopologySpread
from scheduler.state.cache import ClusterCache
from scheduler.state.pod_counts import PodCounts

NAMESPACE = "bench"
SCHEDULER = "gpu-scheduler"


class _Uncounted(PodCounts):
    """Count tables that keep nothing: the cache of the walked plugins pays no upkeep."""

    def add(self, pod: PodInfo, row: int) -> None:
        return None

    def remove(self, pod: PodInfo, row: int) -> None:
        return None

    def replace(self, old: PodInfo, new: PodInfo, row: int) -> None:
        return None


def build_cache(nodes: int, counted: bool) -> ClusterCache:
    """`nodes` empty nodes of the seed types in equal shares; with or without count tables."""
    cache = ClusterCache()
    if not counted:
        cache.pod_counts = _Uncounted(cache)
    for spec in node_specs(nodes):
        for name in spec.node_names():
            cache.add_or_update_node(parse_node(node_manifest(spec, name)))
    return cache


def feature_pods(count: int, seed: int) -> list[tuple[str, PodInfo]]:
    """(kind, pod) of the control-plane benchmark's feature mix, in creation order, pending."""
    sizes = pod_sizes(count, seed)
    found = []
    for index, (kind, gang) in enumerate(feature_kinds(count, seed)):
        manifest = pod_manifest(pod_name(index), sizes[index], SCHEDULER, {})
        manifest["metadata"]["namespace"] = NAMESPACE
        manifest["metadata"]["uid"] = f"uid-{index}"
        found.append((kind, parse_pod(with_features(manifest, index, kind, gang))))
    return found


def walked_framework() -> Framework:
    """The daemon's profile with InterPodAffinity and PodTopologySpread walking the pods."""
    framework = default_framework(SchedulerConfig())
    twins: dict[str, Any] = {
        InterPodAffinity.name: WalkedInterPodAffinity,
        PodTopologySpread.name: WalkedPodTopologySpread,
    }

    def swap(plugin: Any) -> Any:
        twin = twins.get(plugin.name)
        return twin(plugin.weight) if twin is not None and hasattr(plugin, "weight") else plugin

    framework.filters = [swap(p) for p in framework.filters]
    framework.scores = [swap(p) for p in framework.scores]
    return framework


Plugins = Sequence[tuple[FilterPlugin, ScorePlugin]]


def run_plugins(plugins: Plugins, pod: PodInfo, snapshot: Snapshot) -> list[Any]:
    """Each plugin's filter, then its score over the nodes its filter passes: the verdicts."""
    verdicts: list[Any] = []
    for filter_plugin, score_plugin in plugins:
        state = CycleState()
        rejections = filter_plugin.filter(pod, snapshot, state)
        feasible = snapshot.valid.copy()  # feasible: (rows,)
        for rejection in rejections:
            feasible &= ~rejection.failed
        points = score_plugin.score(pod, snapshot, state, feasible)
        verdicts.append([(r.reason, r.failed.tobytes()) for r in rejections])
        verdicts.append(None if points is None else points.tobytes())
    return verdicts


def cpu_ns(work: Callable[[], Any]) -> tuple[int, Any]:
    started = time.process_time_ns()
    result = work()
    return time.process_time_ns() - started, result


@dataclass
class Side:
    """CPU nanoseconds per pod of one side, by stage."""

    plugins: list[int] = field(default_factory=list)
    evaluate: list[int] = field(default_factory=list)
    event: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Result:
    nodes: int
    pods: int
    placed: int
    disagreements: int
    """Pods whose plugin verdicts or chosen node differ between the two sides (0 expected)."""
    new_us: dict[str, float]
    walked_us: dict[str, float]
    by_kind_us: dict[str, tuple[float, float]]
    """Plugins' CPU per pod of each feature kind: (new, walked)."""

    def ratio(self, stage: str) -> float:
        return self.new_us[stage] / self.walked_us[stage] if self.walked_us[stage] else 0.0


def _mean_us(values: Sequence[int]) -> float:
    return float(np.mean(values)) / 1e3 if values else 0.0


def measure(nodes: int, pods: int, seed: int) -> Result:
    caches = {side: build_cache(nodes, counted=side == "new") for side in ("new", "walked")}
    snapshots = {side: Snapshot(cache) for side, cache in caches.items()}
    frameworks = {"new": default_framework(SchedulerConfig()), "walked": walked_framework()}
    plugins: dict[str, Plugins] = {
        "new": [(p, p) for p in (InterPodAffinity(), PodTopologySpread())],
        "walked": [(p, p) for p in (WalkedInterPodAffinity(), WalkedPodTopologySpread())],
    }
    sides = {"new": Side(), "walked": Side()}
    kinds: dict[str, list[tuple[int, int]]] = {}
    placed = disagreements = 0
    for index, (kind, pod) in enumerate(feature_pods(pods, seed)):
        order = ("new", "walked") if index % 2 == 0 else ("walked", "new")
        verdicts: dict[str, Any] = {}
        chosen: dict[str, int] = {}
        for side in order:
            spent, verdicts[side] = cpu_ns(
                functools.partial(run_plugins, plugins[side], pod, snapshots[side])
            )
            sides[side].plugins.append(spent)
        for side in order:
            framework, snapshot = frameworks[side], snapshots[side]
            spent, evaluation = cpu_ns(functools.partial(framework.evaluate, pod, snapshot))
            sides[side].evaluate.append(spent)
            chosen[side] = evaluation.chosen
        kinds.setdefault(kind, []).append((sides["new"].plugins[-1], sides["walked"].plugins[-1]))
        disagreements += verdicts["new"] != verdicts["walked"] or chosen["new"] != chosen["walked"]
        if chosen["new"] < 0:
            continue
        placed += 1
        node = caches["new"].names[chosen["new"]]
        bound = bound_copy(pod, node)
        for side in order:
            spent, _ = cpu_ns(functools.partial(caches[side].add_pod, bound))
            sides[side].event.append(spent)
    stages = ("plugins", "evaluate", "event")
    return Result(
        nodes=nodes,
        pods=pods,
        placed=placed,
        disagreements=disagreements,
        new_us={stage: _mean_us(getattr(sides["new"], stage)) for stage in stages},
        walked_us={stage: _mean_us(getattr(sides["walked"], stage)) for stage in stages},
        by_kind_us={
            kind: (_mean_us([n for n, _ in pairs]), _mean_us([w for _, w in pairs]))
            for kind, pairs in kinds.items()
        },
    )


def bound_copy(pod: PodInfo, node: str) -> PodInfo:
    """`pod` as the informer shows it once bound to `node` and running."""
    return replace(pod, node_name=node, phase="Running")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m hack.bench.affinity",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=1500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result = measure(args.nodes, args.pods, args.seed)
    if args.output == "json":
        report = asdict(result)
        report["ratio"] = {stage: result.ratio(stage) for stage in result.new_us}
        print(json.dumps(report, indent=2))
        return 0
    print(
        f"feature mix, {result.nodes} nodes, {result.pods} pods ({result.placed} placed); "
        f"verdicts differing: {result.disagreements}"
    )
    print(f"{'CPU us per pod':<38} {'tables':>9} {'walk':>9} {'tables/walk':>12}")
    labels = {
        "plugins": "InterPodAffinity + PodTopologySpread",
        "evaluate": "whole profile (Framework.evaluate)",
        "event": "pod added to the cache",
    }
    for stage, label in labels.items():
        print(
            f"{label:<38} {result.new_us[stage]:>9.1f} {result.walked_us[stage]:>9.1f} "
            f"{result.ratio(stage):>11.3f}x"
        )
    print("\nthe two plugins by kind of pod:")
    for kind, (new, walked) in sorted(result.by_kind_us.items()):
        ratio = new / walked if walked else 0.0
        print(f"  {kind:<36} {new:>9.1f} {walked:>9.1f} {ratio:>11.3f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
