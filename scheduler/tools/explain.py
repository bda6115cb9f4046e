"""`gpu-scheduler explain`: every node's filter verdict and score breakdown for one pod.

    gpu-scheduler explain --pod NAMESPACE/NAME [--kubeconfig FILE] [--context NAME]
        [-o table|wide|json|yaml]
        (without --kubeconfig: the KUBECONFIG environment variable, else in-cluster)
    gpu-scheduler explain --pod-file POD.yaml --cluster DUMP.yaml [-o ...]
    gpu-scheduler explain --pod-group NAMESPACE/NAME [--kubeconfig FILE] [-o ...]

The table opens with one line on the pod as a whole (`scheduler.tools.explain_summary`): bound
to which node, or the daemon's reason when it asks for more GPUs than any node has, or how many
nodes fit. A pod the API server would refuse because it asks for a fraction of an extended
resource (`nvidia.com/gpu: "3.5"`) is not ranked: one line says so (exit code 2).

For a gang member (or `--pod-group`) the output is the plan of the whole gang, member by member
(`scheduler.tools.explain_gang`); offline, the dump must then hold the PodGroup too
(`kubectl get nodes,pods,podgroups -A -o yaml`).

DUMP is what `kubectl get nodes,pods -A -o yaml` prints. The same filters, scores and weights as
the daemon are applied (`--config` picks the weights), to a cache built from the nodes and the
bound pods. Rows are sorted best first: feasible nodes by final score, then the rejected ones.
JSON rows have the keys `node`, `feasible`, `reasons`, `components` (name -> points), `raw`,
`normalized` (the NVLink score before and after normalization), `score` (the weighted total
the daemon ranks nodes by), for a pod with ResourceClaims `devices` (claim name -> the
devices "driver/pool/device" it would be allocated on that node), and for a node with GPUs
reported sick `unhealthy_gpus` (GPU index -> reason, e.g. "XID 79"; read from Prometheus as the
daemon does, `scheduler.tools.explain_health`; the table notes them on feasible nodes, and
rejections name them). A pod with claims reads the
cluster's DeviceClasses, ResourceSlices, ResourceClaims and DeviceTaintRules too (offline: put
them in the dump, `kubectl get nodes,pods,deviceclasses,resourceslices,resourceclaims -A -o
yaml`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from reclaim.health import GpuRef, Sickness
from scheduler.config import config_from_args
from scheduler.framework.runtime import Framework
from scheduler.framework.snapshot import Snapshot
from scheduler.kube.claims import list_dra_objects
from scheduler.model.objects import parse_node, parse_pod
from scheduler.model.unsupported import unsupported_reasons
from scheduler.plugins.extended_resources import mapped_resources
from scheduler.plugins.node_affinity import NAME as AFFINITY
from scheduler.plugins.nvlink import NAME as NVLINK
from scheduler.plugins.nvlink import NVLink
from scheduler.state.cache import ClusterCache
from scheduler.state.gpu_health import record_verdicts
from scheduler.tools.errors import (
    EXIT_RUNTIME,
    CommandError,
    check_kubeconfig,
    kubeconfig_from_env,
)
from scheduler.tools.explain_claims import add_dra_objects, claim_devices, claim_reasons
from scheduler.tools.explain_gang import (
    explain_gang,
    find_group,
    gang_of,
    group_from_dump,
    read_group,
    render_gang,
)
from scheduler.tools.explain_health import read_sick_gpus, unhealthy_note
from scheduler.tools.explain_summary import fractional_extended, summary_line
from scheduler.tools.output import add_context_flag, add_output_flag, structured

COMPONENTS = ("base", "domain_integrity", "node_matching", "domain_completion", "efficiency")
JsonObject = dict[str, Any]
Gang = tuple[str, JsonObject | None]
"""A gang to explain: its key and its PodGroup's JSON (None: the PodGroup does not exist)."""


def _number(value: float) -> float | None:
    return None if math.isnan(value) else round(float(value), 2)


def explain(
    pod_obj: Mapping[str, Any],
    objects: Iterable[Mapping[str, Any]],
    framework: Framework,
    sick: Mapping[GpuRef, Sickness] | None = None,
) -> list[JsonObject]:
    """Rows for `pod_obj` against the Nodes and Pods in `objects` (plain API JSON), with the
    GPUs of `sick` unusable as in the daemon (`scheduler.tools.explain_health`)."""
    return explain_pod(pod_obj, objects, framework, sick)[0]


def explain_pod(
    pod_obj: Mapping[str, Any],
    objects: Iterable[Mapping[str, Any]],
    framework: Framework,
    sick: Mapping[GpuRef, Sickness] | None = None,
) -> tuple[list[JsonObject], str]:
    """`explain`'s rows, and the daemon's message when the pod asks for more GPUs than any node
    has (`scheduler.core.cycle.larger_than_any_node`; "" otherwise)."""
    from scheduler.core.cycle import larger_than_any_node

    cache = ClusterCache()
    items = list(objects)
    for obj in items:
        if obj.get("kind") == "Node":
            cache.add_or_update_node(parse_node(obj))
    add_dra_objects(cache, items)
    if sick:
        record_verdicts(cache, sick)
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
    # A pod the cycle does not place at all (invalid or unsupported fields) is infeasible on
    # every node, for the same reason everywhere.
    blocked = (
        [f"pod has invalid fields: {e}" for e in pod.errors]
        if pod.errors
        else unsupported_reasons(pod.unsupported)
        if pod.unsupported
        else []
    )
    rows: list[JsonObject] = []
    for row in np.flatnonzero(snapshot.valid):
        reasons = blocked or claim_reasons(
            evaluation.state,
            int(row),
            sorted({r.reason for r in evaluation.diagnosis.rejections if r.failed[row]}),
        )
        ok = bool(feasible[row]) and not blocked
        components: dict[str, float] = {}
        raw = norm = math.nan
        if ok and nvlink is not None and normalized is not None:  # no scores for rejected nodes
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
        if pod.resource_claims is not None or mapped_resources(pod, cache.dra):
            rows[-1]["devices"] = claim_devices(evaluation.state, int(row)) if ok else {}
        unhealthy = cache.sick_gpus.get(cache.names[row])
        if unhealthy:
            rows[-1]["unhealthy_gpus"] = {str(i): why for i, why in sorted(unhealthy.items())}
    rows.sort(key=lambda r: (not r["feasible"], -(r["score"] or 0.0), r["node"]))
    return rows, larger_than_any_node(pod, snapshot)


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
                "; ".join(
                    [*row["reasons"], *_notes(row)],
                ),
            ]
        )
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(header))]
    return "\n".join(
        "  ".join(str(cell).ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )


def _yaml_problem(error: yaml.YAMLError) -> str:
    """One line: the parser's problem and where (line:column), without the echoed source."""
    mark = getattr(error, "problem_mark", None)
    problem = " ".join(str(getattr(error, "problem", None) or error).split())[:200]
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}" if mark else problem


def load_cluster(path: Path) -> list[JsonObject]:
    """`load_dump` of a cluster dump, which must hold at least one Node (ValueError otherwise)."""
    objects = load_dump(path)
    if not any(o.get("kind") == "Node" for o in objects):
        kinds = sorted({str(o.get("kind") or "?")[:40] for o in objects})
        held = f"only {', '.join(kinds)}" if kinds else "nothing"
        raise ValueError(
            f"{path}: no Node in the file ({held}); write it with "
            "`kubectl get nodes,pods -A -o yaml > FILE`"
        )
    return objects


def load_dump(path: Path) -> list[JsonObject]:
    """Objects of a `kubectl get ... -o yaml` List (or a single object, or a YAML stream).

    Raises OSError, or ValueError naming the file (and the line, for a YAML syntax error) for
    anything that is not YAML mappings (nesting too deep for the parser included)."""
    try:
        documents = [d for d in yaml.safe_load_all(path.read_text()) if d]
    except RecursionError:
        raise ValueError(f"{path}: YAML nested too deeply") from None
    except yaml.YAMLError as error:
        raise ValueError(f"{path}: not valid YAML: {_yaml_problem(error)}") from None
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
    kubeconfig: Path | None,
    pod_ref: str | None,
    group_ref: str | None = None,
    context: str | None = None,
) -> tuple[JsonObject | None, list[JsonObject], Gang | None]:
    """The pod `pod_ref` (None with `group_ref`), every Node and Pod, and the gang to explain
    (the pod's, or the PodGroup `group_ref`) with its PodGroup; `context` of the kubeconfig."""
    from kubernetes_asyncio import client

    from scheduler.kube.apierrors import APINotFoundError, expect_success
    from scheduler.kube.client import api_client_for

    config_file = str(kubeconfig) if kubeconfig else None
    async with await api_client_for(config_file, context) as api_client:
        core = client.CoreV1Api(api_client)

        async def raw(call: Any) -> Any:
            return json.loads(await expect_success(await call))

        pod: JsonObject | None = None
        gang: Gang | None = None
        if pod_ref is not None:
            namespace, _, name = pod_ref.partition("/")
            try:
                pod = await raw(core.read_namespaced_pod(name, namespace, _preload_content=False))
            except APINotFoundError:
                raise CommandError(
                    f"pod {namespace}/{name} not found; list the pods with "
                    f"`kubectl get pods -n {namespace}`",
                    EXIT_RUNTIME,
                ) from None
            pod = {**pod, "kind": "Pod"}
            key = gang_of(pod)
            if key:
                gang = (key, await read_group(api_client, key))
        elif group_ref is not None:
            gang = await find_group(api_client, group_ref)
        nodes = await raw(core.list_node(_preload_content=False))
        pods = await raw(core.list_pod_for_all_namespaces(_preload_content=False))
        objects = [{**n, "kind": "Node"} for n in nodes["items"]]
        objects += [{**p, "kind": "Pod"} for p in pods["items"]]
        if gang is not None or (pod is not None and (pod.get("spec") or {}).get("resourceClaims")):
            objects += await list_dra_objects(api_client)  # a gang's members may use claims
    return pod, objects, gang


def _offline(pod_file: Path, cluster: Path | None) -> tuple[JsonObject, list[JsonObject]]:
    """The pod of `pod_file` and the objects of the `cluster` dump; CommandError naming the file
    when either cannot be read or holds no Pod (no Node)."""
    if cluster is None:
        raise CommandError("--pod-file needs --cluster DUMP.yaml")
    try:
        pods = [o for o in load_dump(pod_file) if o.get("kind", "Pod") == "Pod"]
        if not pods:
            raise ValueError(f"{pod_file}: no Pod in the file")
        pod_obj = pods[0]
        pod_obj.setdefault("metadata", {}).setdefault("namespace", "default")
        return pod_obj, load_cluster(cluster)
    except OSError as error:
        raise CommandError(f"{error.filename}: cannot read: {error.strerror or error}") from None
    except ValueError as error:
        raise CommandError(str(error)) from None


def _ref(flag: str, value: str) -> str:
    if not all(value.partition("/")[::2]):
        raise CommandError(f"{flag} must be NAMESPACE/NAME, got {value[:100]!r}")
    return value


def run_explain(args: argparse.Namespace) -> int:
    """The `explain` handler. Errors the user can fix raise `CommandError` (or the configuration's
    `ConfigError`), which the CLI entry prints as one line. A gang member (or `--pod-group`)
    prints the plan of its whole gang (`scheduler.tools.explain_gang`)."""
    from scheduler.core.profile import default_framework

    settings = config_from_args(args, os.environ)
    gang: Gang | None = None
    pod_obj: JsonObject | None
    sick: dict[GpuRef, Sickness] = {}
    given = [flag for flag in ("pod", "pod_file", "pod_group") if getattr(args, flag, None)]
    if len(given) > 1:
        flags = " and ".join("--" + g.replace("_", "-") for g in given)
        raise CommandError(f"give one of --pod, --pod-file, --pod-group, not {flags}")
    if args.pod_file:
        pod_obj, objects = _offline(args.pod_file, args.cluster)
        key = gang_of(pod_obj)
        if key:
            objects = [o for o in objects if not _same_pod(o, pod_obj)] + [pod_obj]
            gang = (key, group_from_dump(key, objects))
    elif args.pod or args.pod_group:
        if args.pod:
            _ref("--pod", args.pod)
        else:
            _ref("--pod-group", args.pod_group)
        kubeconfig = settings.kubeconfig or kubeconfig_from_env(os.environ)
        check_kubeconfig(kubeconfig, os.environ, args.context)
        pod_obj, objects, gang = asyncio.run(
            _from_cluster(kubeconfig, args.pod or None, args.pod_group or None, args.context)
        )
        sick = asyncio.run(read_sick_gpus(settings)) if args.pod else {}
    else:
        raise CommandError(
            "give --pod NAMESPACE/NAME, --pod-group NAMESPACE/NAME "
            "or --pod-file FILE --cluster DUMP"
        )
    framework = default_framework(settings)
    if gang is not None:
        key, group_obj = gang
        explanation = explain_gang(key, group_obj, objects, framework, settings.scheduler_name)
        text = structured(explanation.as_json(), args.output)
        print(text if text is not None else render_gang(explanation))
        return 0
    assert pod_obj is not None
    fraction = fractional_extended(pod_obj)
    if fraction is not None:
        source = args.pod_file or "the pod"
        raise CommandError(
            f"{source}: {fraction}: must be an integer; the API server refuses this pod "
            "(extended resources such as nvidia.com/gpu come in whole units), so it is not ranked"
        )
    rows, too_big = explain_pod(pod_obj, objects, framework, sick)
    text = structured(rows, args.output)
    print(
        text
        if text is not None
        else summary_line(pod_obj, rows, too_big) + "\n" + render_table(rows)
    )
    return 0


def _same_pod(obj: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    """Whether dump object `obj` is the Pod `pod` (same namespace and name)."""
    if obj.get("kind") != "Pod":
        return False
    a, b = obj.get("metadata"), pod.get("metadata")
    if not isinstance(a, Mapping) or not isinstance(b, Mapping):
        return False
    return bool(
        a.get("name") == b.get("name") and a.get("namespace", "default") == b.get("namespace")
    )


def _notes(row: JsonObject) -> list[str]:
    unhealthy = row.get("unhealthy_gpus")
    return [unhealthy_note(unhealthy)] if unhealthy and row["feasible"] else []


def add_explain_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "explain",
        help="show every node's filter verdict and score breakdown for a pod",
        description="Every node's filter verdict and score breakdown for one pod, from the "
        "cluster (--pod) or offline from files (--pod-file with --cluster).",
    )
    parser.add_argument(
        "--pod",
        metavar="NAMESPACE/NAME",
        help="a pod in the cluster (a gang member: the plan of its whole gang)",
    )
    parser.add_argument(
        "--pod-group",
        metavar="NAMESPACE/NAME",
        help="the plan of a gang: a PodGroup (scheduling.k8s.io/v1beta1, else "
        "scheduling.x-k8s.io/v1alpha1) in the cluster",
    )
    parser.add_argument("--pod-file", type=Path, help="a pod manifest (offline)")
    parser.add_argument(
        "--cluster",
        type=Path,
        help="kubectl get nodes,pods -A -o yaml output (for a gang member: nodes,pods,podgroups)",
    )
    add_output_flag(parser)
    parser.add_argument(
        "--config", type=Path, metavar="FILE", help="the daemon's YAML configuration (weights)"
    )
    parser.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="kubeconfig for --pod (default: $KUBECONFIG, else the in-cluster configuration)",
    )
    add_context_flag(parser)
    parser.set_defaults(handler=run_explain)
