"""`gpu-scheduler explain`: every node's filter verdict and score breakdown for one pod.

    gpu-scheduler explain --pod NAMESPACE/NAME [--kubeconfig FILE] [-o table|json]
    gpu-scheduler explain --pod-file POD.yaml --cluster DUMP.yaml [-o table|json]

DUMP is what `kubectl get nodes,pods -A -o yaml` prints. The same filters, scores and weights as
the daemon are applied (`--config` picks the weights), to a cache built from the nodes and the
bound pods. Rows are sorted best first: feasible nodes by final score, then the rejected ones.
JSON rows have the keys `node`, `feasible`, `reasons`, `components` (name -> points), `raw`,
`normalized` (the NVLink score before and after normalization) and `score` (the weighted total
the daemon ranks nodes by).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from scheduler.cache import ClusterCache
from scheduler.config import SchedulerConfig, add_config_flags, config_from_args
from scheduler.framework.runtime import Framework
from scheduler.framework.snapshot import Snapshot
from scheduler.objects import parse_node, parse_pod
from scheduler.plugins.node_affinity import NAME as AFFINITY
from scheduler.plugins.nvlink import NAME as NVLINK
from scheduler.plugins.nvlink import NVLink
from scheduler.plugins.unsupported import unsupported_reasons

COMPONENTS = ("base", "domain_integrity", "node_matching", "domain_completion", "efficiency")
JsonObject = dict[str, Any]


def _number(value: float) -> float | None:
    return None if math.isnan(value) else round(float(value), 2)


def explain(
    pod_obj: Mapping[str, Any],
    objects: Iterable[Mapping[str, Any]],
    framework: Framework,
) -> list[JsonObject]:
    """Rows for `pod_obj` against the Nodes and Pods in `objects` (plain API JSON)."""
    cache = ClusterCache()
    items = list(objects)
    for obj in items:
        if obj.get("kind") == "Node":
            cache.add_or_update_node(parse_node(obj))
    pod = parse_pod(pod_obj)
    for obj in items:
        if obj.get("kind") == "Pod":
            other = parse_pod(obj)
            if other.key != pod.key:
                cache.add_pod(other)
    snapshot = Snapshot(cache)
    evaluation = framework.evaluate(pod, snapshot, choose=False)
    feasible = evaluation.diagnosis.feasible  # feasible: (rows,)
    scores = evaluation.state.data.get(NVLINK)
    if scores is None and pod.gpus:
        plugin = next(p for p in framework.scores if isinstance(p, NVLink))
        scores = plugin.scores(pod, snapshot)
    nvlink = scores.per_row() if scores is not None else None
    normalized = scores.normalized() if scores is not None else None
    affinity = evaluation.scores.get(AFFINITY)
    rows: list[JsonObject] = []
    for row in np.flatnonzero(snapshot.valid):
        reasons = sorted({r.reason for r in evaluation.diagnosis.rejections if r.failed[row]})
        ok = bool(feasible[row])
        components: dict[str, float] = {}
        raw = norm = math.nan
        if nvlink is not None and normalized is not None:
            if bool(nvlink.feasible[row]):
                components = {name: float(getattr(nvlink, name)[row]) for name in COMPONENTS}
            raw = float(nvlink.raw[row])
            norm = math.nan if math.isnan(raw) else float(normalized[row])
        if affinity is not None and ok and pod.preferred_terms:
            components["preferred_affinity"] = float(affinity[row])
        rows.append(
            {
                "node": cache.names[row],
                "feasible": ok,
                "reasons": reasons,
                "components": components,
                "raw": _number(raw),
                "normalized": _number(norm),
                "score": round(float(evaluation.total[row]), 2) if ok else None,
            }
        )
    rows.sort(key=lambda r: (not r["feasible"], -(r["score"] or 0.0), r["node"]))
    if pod.errors:
        for item in rows:
            item["reasons"] = [f"pod has invalid fields: {e}" for e in pod.errors]
            item["feasible"] = False
    elif pod.unsupported:  # the cycle does not place it either: say why, on every node
        for item in rows:
            item["reasons"] = unsupported_reasons(pod.unsupported)
            item["feasible"] = False
    return rows


def render_table(rows: list[JsonObject]) -> str:
    header = [
        "NODE",
        "FEASIBLE",
        *(c.upper() for c in COMPONENTS),
        "RAW",
        "NORMALIZED",
        "SCORE",
        "REASONS",
    ]
    lines = [header]
    for row in rows:
        points = row["components"]
        lines.append(
            [
                row["node"],
                "yes" if row["feasible"] else "no",
                *(f"{points[c]:g}" if c in points else "-" for c in COMPONENTS),
                "-" if row["raw"] is None else f"{row['raw']:g}",
                "-" if row["normalized"] is None else f"{row['normalized']:g}",
                "-" if row["score"] is None else f"{row['score']:g}",
                "; ".join(row["reasons"]),
            ]
        )
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(header))]
    return "\n".join(
        "  ".join(str(cell).ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )


def load_dump(path: Path) -> list[JsonObject]:
    """Objects of a `kubectl get ... -o yaml` List (or a single object, or a YAML stream).

    Raises OSError, yaml.YAMLError, or ValueError naming the file for anything that is not
    YAML mappings (nesting too deep for the parser included)."""
    try:
        documents = [d for d in yaml.safe_load_all(path.read_text()) if d]
    except RecursionError:
        raise ValueError(f"{path}: YAML nested too deeply") from None
    objects: list[JsonObject] = []
    for document in documents:
        if not isinstance(document, dict):
            raise ValueError(f"{path}: expected Kubernetes objects, got {type(document).__name__}")
        list_kind = document.get("kind")
        list_kind = list_kind if isinstance(list_kind, str) else ""
        if list_kind.endswith("List") or "items" in document:
            items = document.get("items") or []
            if not isinstance(items, list):
                raise ValueError(f"{path}: items is a {type(items).__name__}, not a list")
            for item in items:
                if not isinstance(item, dict):
                    raise ValueError(f"{path}: an item is a {type(item).__name__}, not an object")
                kind = item.get("kind") or list_kind.removesuffix("List")
                objects.append({**item, "kind": kind})
        else:
            objects.append(document)
    return objects


async def _from_cluster(
    settings: SchedulerConfig, pod_ref: str
) -> tuple[JsonObject, list[JsonObject]]:
    from kubernetes_asyncio import client

    from scheduler.kube.apierrors import expect_success
    from scheduler.kube.client import api_client_for

    namespace, _, name = pod_ref.partition("/")
    if not name:
        raise ValueError(f"--pod must be NAMESPACE/NAME, got {pod_ref!r}")
    kubeconfig = str(settings.kubeconfig) if settings.kubeconfig else None
    async with await api_client_for(kubeconfig) as api_client:
        core = client.CoreV1Api(api_client)

        async def raw(call: Any) -> Any:
            return json.loads(await expect_success(await call))

        pod = await raw(core.read_namespaced_pod(name, namespace, _preload_content=False))
        nodes = await raw(core.list_node(_preload_content=False))
        pods = await raw(core.list_pod_for_all_namespaces(_preload_content=False))
    objects = [{**n, "kind": "Node"} for n in nodes["items"]]
    objects += [{**p, "kind": "Pod"} for p in pods["items"]]
    return {**pod, "kind": "Pod"}, objects


def run_explain(args: argparse.Namespace) -> int:
    from scheduler.profile import default_framework

    try:
        settings = config_from_args(args, os.environ)
        if args.pod_file:
            if not args.cluster:
                raise ValueError("--pod-file needs --cluster DUMP.yaml")
            (pod_obj,) = [o for o in load_dump(args.pod_file) if o.get("kind", "Pod") == "Pod"][
                :1
            ] or [{}]
            if not pod_obj:
                raise ValueError(f"{args.pod_file}: no Pod in the file")
            pod_obj.setdefault("metadata", {}).setdefault("namespace", "default")
            objects = load_dump(args.cluster)
        elif args.pod:
            pod_obj, objects = asyncio.run(_from_cluster(settings, args.pod))
        else:
            raise ValueError("give --pod NAMESPACE/NAME or --pod-file FILE --cluster DUMP")
    except (OSError, ValueError, yaml.YAMLError) as error:
        print(f"gpu-scheduler explain: {error}", file=sys.stderr)
        return 2
    rows = explain(pod_obj, objects, default_framework(settings))
    if args.output == "json":
        print(json.dumps(rows, indent=2))
    else:
        print(render_table(rows))
    return 0


def add_explain_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "explain", help="show every node's filter verdict and score breakdown for a pod"
    )
    parser.add_argument("--pod", metavar="NAMESPACE/NAME", help="a pod in the cluster")
    parser.add_argument("--pod-file", type=Path, help="a pod manifest (offline)")
    parser.add_argument("--cluster", type=Path, help="kubectl get nodes,pods -A -o yaml output")
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table")
    add_config_flags(parser)
    parser.set_defaults(handler=run_explain)
