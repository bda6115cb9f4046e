"""Inputs of `gpu-scheduler simulate`: node and pod lists, read from openb CSV or native YAML.

Two formats, chosen by the file's extension (`.csv`, or `.yaml` / `.yml`):

openb CSV (Alibaba cluster-trace-gpu-v2023, the ATC'23 fragmentation paper's traces):

- nodes: `sn,cpu_milli,memory_mib,gpu,model`. `model` is the GPU type (P100, T4, V100M16,
  V100M32, A10, and the undisclosed G2, G3); it becomes the node label `nvidia.com/gpu.product`
  unchanged. Nodes without GPUs have an empty model and get no product label.
- pods: `name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,...]`. The columns after
  `gpu_milli` (qos, phase, times) are ignored; `gpu_milli` and `gpu_spec` may be absent (the
  multigpu variants have no `gpu_spec`). `gpu_milli` is the share of one GPU a GPU-sharing pod
  asks for (upstream README: only for `num_gpu == 1`); 1000 is a whole GPU. `gpu_spec` lists
  the GPU types the pod accepts, separated by `|` (upstream README: `V100M16|V100M32` "means the
  task can run on NVIDIA V100 with either 16GB VRAM or 32GB VRAM"; empty: no constraint). It
  becomes required node affinity `nvidia.com/gpu.product In (...)`.

Native YAML (one file may hold both lists; `--nodes` reads `nodes`, `--pods` reads `pods`):

    nodes:
      - name: g8-0
        cpu: "128"              # Kubernetes quantity: cores ("128", "500m") ...
        memory: 1Ti             # ... bytes ("1Ti", "512Gi")
        gpus: 8
        gpu_product: NVIDIA-H100-80GB-HBM3
        nvlink_domains: 0-3,4-7 # optional; default by GPU count (see topology.domains)
        labels: {rack: r1}      # optional: more node labels (gang topology keys)
    pods:
      - name: train-0
        cpu: "16"
        memory: 64Gi
        gpus: 4                 # whole GPUs; 0 for a CPU-only pod
        gpu_products: [NVIDIA-H100-80GB-HBM3]   # optional: accepted GPU types

Every node is a schedulable Node with allocatable cpu, memory, `nvidia.com/gpu` and
`pods: 110` (the kubelet's default) and the labels `kubernetes.io/hostname` and, with a GPU
product, `nvidia.com/gpu.product`. NVLink domains come from the node's `nvlink_domains`, else
from `--nvlink-domains COUNT=LAYOUT`, else from the defaults of `topology.domains` (2 GPUs: one
domain; 4: two of 2; 8: two of 4). Every problem raises `TraceError` naming the file, the line or
entry, and the field.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from scheduler.model.objects import NodeInfo, PodInfo, parse_node, parse_pod
from scheduler.model.quantity import QuantityError, base_units, cpu_millis
from scheduler.model.resources import GPU_RESOURCE
from topology.domains import NVLINK_DOMAINS_ANNOTATION, TopologyError, parse_domains
from topology.text import clip, quote

GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
HOSTNAME_LABEL = "kubernetes.io/hostname"
WHOLE_GPU_MILLI = 1000
"""`gpu_milli` of a pod that takes whole GPUs; below it the pod shares one GPU."""
MAX_PODS_PER_NODE = 110
"""Allocatable pods of every simulated node (the kubelet's default `maxPods`)."""
NAMESPACE = "simulate"
GPU_SPEC_SEPARATOR = "|"
CSV_SUFFIXES = (".csv",)
YAML_SUFFIXES = (".yaml", ".yml")

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu")


class TraceError(ValueError):
    """An input file cannot be read; the message names the file, the row or entry, the field."""


@dataclass(frozen=True)
class TraceNode:
    """One node of the input. `cpu` and `memory` are Kubernetes quantities."""

    name: str
    cpu: str
    memory: str
    gpus: int
    gpu_product: str
    nvlink_domains: str | None = None
    labels: tuple[tuple[str, str], ...] = ()
    """Node labels beyond the hostname and GPU product (e.g. a rack, for gang topology keys)."""


@dataclass(frozen=True)
class TracePod:
    """One pod of the input. `gpu_milli` < 1000 with `gpus` >= 1 marks a GPU-sharing pod;
    `gpu_products` empty means any GPU type (or none, for a CPU-only pod)."""

    name: str
    cpu: str
    memory: str
    gpus: int
    gpu_milli: int = WHOLE_GPU_MILLI
    gpu_products: tuple[str, ...] = ()

    @property
    def shares_gpu(self) -> bool:
        """Asks for a fraction of a GPU (the scheduler only hands out whole GPUs)."""
        return self.gpus >= 1 and self.gpu_milli < WHOLE_GPU_MILLI


# -- domain overrides --------------------------------------------------------------------------


def parse_domain_overrides(values: Iterable[str]) -> dict[int, str]:
    """`["8=0-3,4-7", "4=0-3"]` -> {8: "0-3,4-7", 4: "0-3"}: NVLink layout by GPU count.

    Each layout must be valid for its count (`topology.domains.parse_domains`); `TraceError`
    otherwise. A later value for the same count replaces an earlier one.
    """
    layouts: dict[int, str] = {}
    for value in values:
        count_text, sep, layout = value.partition("=")
        if not sep or not count_text.strip().isdigit():
            raise TraceError(f"--nvlink-domains {value!r}: expected COUNT=LAYOUT, e.g. 8=0-3,4-7")
        count = int(count_text)
        try:
            parse_domains(layout, count)
        except TopologyError as error:
            raise TraceError(f"--nvlink-domains {value!r}: {error}") from error
        layouts[count] = layout.strip()
    return layouts


# -- Kubernetes-shaped objects -----------------------------------------------------------------


def node_object(node: TraceNode, layouts: Mapping[int, str]) -> dict[str, Any]:
    """The Node JSON of `node` (what an informer would deliver) for `scheduler.model.objects`."""
    allocatable = {
        "cpu": node.cpu,
        "memory": node.memory,
        "pods": str(MAX_PODS_PER_NODE),
        GPU_RESOURCE: str(node.gpus),
    }
    labels = {**dict(node.labels), HOSTNAME_LABEL: node.name}
    if node.gpu_product:
        labels[GPU_PRODUCT_LABEL] = node.gpu_product
    annotations = {}
    layout = node.nvlink_domains if node.nvlink_domains is not None else layouts.get(node.gpus)
    if layout is not None:
        annotations[NVLINK_DOMAINS_ANNOTATION] = layout
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node.name, "labels": labels, "annotations": annotations},
        "spec": {},
        "status": {"capacity": dict(allocatable), "allocatable": allocatable},
    }


def pod_object(pod: TracePod) -> dict[str, Any]:
    """The pending Pod JSON of a whole-GPU or CPU-only `pod` (GPUs as a limit, as users write
    them; the accepted GPU types as required node affinity on the product label)."""
    resources: dict[str, Any] = {"requests": {"cpu": pod.cpu, "memory": pod.memory}}
    if pod.gpus:
        resources["limits"] = {GPU_RESOURCE: str(pod.gpus)}
    spec: dict[str, Any] = {
        "schedulerName": "gpu-scheduler",
        "containers": [{"name": "main", "image": "trace", "resources": resources}],
    }
    if pod.gpu_products:
        requirement = {
            "key": GPU_PRODUCT_LABEL,
            "operator": "In",
            "values": list(pod.gpu_products),
        }
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [requirement]}]
                }
            }
        }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": pod.name, "namespace": NAMESPACE},
        "spec": spec,
        "status": {"phase": "Pending"},
    }


def build_nodes(nodes: Sequence[TraceNode], layouts: Mapping[int, str]) -> list[NodeInfo]:
    """`node_object` of each node, parsed as the scheduler parses nodes, NVLink layouts by GPU
    count from `layouts`; a node the scheduler would flag (e.g. a bad NVLink layout) is a
    `TraceError` naming it."""
    parsed = []
    for node in nodes:
        info = parse_node(node_object(node, layouts))
        if info.errors:
            problems = "; ".join(str(e) for e in info.errors)
            raise TraceError(f"node {node.name}: {problems}")
        parsed.append(info)
    return parsed


def parsed_pod(pod: TracePod) -> PodInfo:
    """`pod_object(pod)` parsed as the scheduler parses pods; `TraceError` naming the pod and
    the problems when the scheduler would flag it."""
    info = parse_pod(pod_object(pod))
    if info.errors:
        problems = "; ".join(str(e) for e in info.errors)
        raise TraceError(f"pod {pod.name}: {problems}")
    return info


# -- arrivals ----------------------------------------------------------------------------------


def arrival_order(
    demands: Sequence[float], demand: float, capacity: float, sample: bool, seed: int
) -> tuple[list[int], int]:
    """Indices into `demands` (the GPUs each pod of a list asks for) in arrival order until
    their sum reaches `demand * capacity`, and the passes over the list: the list's order,
    repeated from the top, or with `sample` draws with replacement from a generator seeded with
    `seed`. Without GPU demand the list arrives once (list order) or len(demands) times
    (sampling). `ValueError` unless `demand` is a positive number."""
    if not demand > 0 or not math.isfinite(demand):
        raise ValueError(f"--demand must be a positive number, got {demand}")
    target = demand * capacity
    rng = np.random.default_rng(seed)
    order: list[int] = []
    requested = 0.0
    passes = 0
    limit = len(demands) if sum(demands) == 0 else None
    while demands and requested < target and (limit is None or len(order) < limit):
        if sample:
            index = int(rng.integers(len(demands)))
        else:
            index = len(order) % len(demands)
            passes += index == 0
        order.append(index)
        requested += demands[index]
    return order, passes


# -- CSV ---------------------------------------------------------------------------------------


def _integer(row: Mapping[str, str | None], column: str, where: str) -> int:
    text = (row.get(column) or "").strip()
    try:
        value = int(float(text)) if text else 0
    except (ValueError, OverflowError) as error:  # "x"; "inf", "1e400"
        raise TraceError(f"{where}: {column} {quote(text)} is not a number") from error
    if value < 0:
        raise TraceError(f"{where}: {column} must not be negative, got {value}")
    return value


def _csv_rows(path: Path, required: tuple[str, ...]) -> Iterable[tuple[str, dict[str, str]]]:
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in required if c not in (reader.fieldnames or [])]
        if missing:
            raise TraceError(f"{path}: missing column(s) {', '.join(missing)}")
        for line, row in enumerate(reader, start=2):
            yield f"{path}:{line}", row


def read_nodes_csv(path: Path) -> list[TraceNode]:
    """Nodes of an openb node list (`sn,cpu_milli,memory_mib,gpu,model`)."""
    nodes = []
    for where, row in _csv_rows(path, NODE_COLUMNS):
        name = (row.get("sn") or "").strip()
        if not name:
            raise TraceError(f"{where}: sn is empty")
        nodes.append(
            TraceNode(
                name=name,
                cpu=f"{_integer(row, 'cpu_milli', where)}m",
                memory=f"{_integer(row, 'memory_mib', where)}Mi",
                gpus=_integer(row, "gpu", where),
                gpu_product=(row.get("model") or "").strip(),
            )
        )
    return nodes


def read_pods_csv(path: Path) -> list[TracePod]:
    """Pods of an openb pod list; `gpu_milli` defaults to 1000 for GPU pods when absent."""
    pods = []
    for where, row in _csv_rows(path, POD_COLUMNS):
        name = (row.get("name") or "").strip()
        if not name:
            raise TraceError(f"{where}: name is empty")
        gpus = _integer(row, "num_gpu", where)
        milli = _integer(row, "gpu_milli", where) if row.get("gpu_milli") else WHOLE_GPU_MILLI
        spec = (row.get("gpu_spec") or "").strip()
        products = tuple(p for p in (s.strip() for s in spec.split(GPU_SPEC_SEPARATOR)) if p)
        pods.append(
            TracePod(
                name=name,
                cpu=f"{_integer(row, 'cpu_milli', where)}m",
                memory=f"{_integer(row, 'memory_mib', where)}Mi",
                gpus=gpus,
                gpu_milli=milli if gpus else 0,
                gpu_products=tuple(dict.fromkeys(products)),  # drop repeats, keep order
            )
        )
    return pods


# -- YAML --------------------------------------------------------------------------------------


def yaml_entries(path: Path, key: str) -> list[tuple[str, Mapping[str, Any]]]:
    """(where, entry) of each mapping in the list under `key` of the YAML file `path`; `where`
    names the file and the entry, for error messages. `TraceError` for anything else."""
    try:
        document = yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        raise TraceError(f"{path}: not valid YAML: {clip(str(error), 400)}") from error
    except (ValueError, RecursionError) as error:  # an int of > 4300 digits; deep nesting
        raise TraceError(f"{path}: not usable YAML: {clip(str(error), 200)}") from None
    if not isinstance(document, Mapping) or not isinstance(document.get(key), list):
        raise TraceError(f"{path}: expected a mapping with a list under {key!r}")
    entries = []
    for index, entry in enumerate(document[key]):
        where = f"{path}: {key}[{index}]"
        if not isinstance(entry, Mapping):
            raise TraceError(f"{where}: expected a mapping, got {type(entry).__name__}")
        entries.append((where, entry))
    return entries


def yaml_text(entry: Mapping[str, Any], field: str, where: str, default: str | None = None) -> str:
    """`entry[field]` as a stripped string (a string or number; `default` when absent)."""
    value = entry.get(field, default)
    if value is None or isinstance(value, bool | list | dict):
        raise TraceError(f"{where}: {field} is required (a string or number)")
    return str(value).strip()


def yaml_quantity(entry: Mapping[str, Any], field: str, where: str) -> str:
    """`entry[field]` as a non-negative Kubernetes quantity (cores for `cpu`, else bytes)."""
    text = yaml_text(entry, field, where)
    try:
        amount = cpu_millis(text) if field == "cpu" else base_units(text)
    except QuantityError as error:
        raise TraceError(f"{where}: {field}: {error}") from error
    if amount < 0:
        raise TraceError(f"{where}: {field} must not be negative, got {quote(text)}")
    return text


def yaml_count(entry: Mapping[str, Any], field: str, where: str) -> int:
    """`entry[field]` as a non-negative integer (0 when absent)."""
    value = entry.get(field, 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TraceError(f"{where}: {field} must be a non-negative integer, got {quote(value)}")
    return value


def read_nodes_yaml(path: Path) -> list[TraceNode]:
    """Nodes listed under `nodes:` (see the module docstring for the fields)."""
    nodes = []
    for where, entry in yaml_entries(path, "nodes"):
        gpus = yaml_count(entry, "gpus", where)
        layout = entry.get("nvlink_domains")
        if layout is not None:
            try:
                parse_domains(str(layout), gpus)
            except TopologyError as error:
                raise TraceError(f"{where}: nvlink_domains: {error}") from error
        labels = entry.get("labels", {})
        if not isinstance(labels, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
        ):
            raise TraceError(f"{where}: labels must be a mapping of strings to strings")
        nodes.append(
            TraceNode(
                name=yaml_text(entry, "name", where),
                cpu=yaml_quantity(entry, "cpu", where),
                memory=yaml_quantity(entry, "memory", where),
                gpus=gpus,
                gpu_product=yaml_text(entry, "gpu_product", where, default=""),
                nvlink_domains=None if layout is None else str(layout),
                labels=tuple(sorted(labels.items())),
            )
        )
    return nodes


def read_pods_yaml(path: Path) -> list[TracePod]:
    """Pods listed under `pods:` (whole GPUs only; see the module docstring for the fields)."""
    pods = []
    for where, entry in yaml_entries(path, "pods"):
        products = entry.get("gpu_products", [])
        if not isinstance(products, list) or not all(isinstance(p, str) for p in products):
            raise TraceError(f"{where}: gpu_products must be a list of strings")
        pods.append(
            TracePod(
                name=yaml_text(entry, "name", where),
                cpu=yaml_quantity(entry, "cpu", where),
                memory=yaml_quantity(entry, "memory", where),
                gpus=yaml_count(entry, "gpus", where),
                gpu_products=tuple(products),
            )
        )
    return pods


# -- either ------------------------------------------------------------------------------------


def _format(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix in CSV_SUFFIXES:
        return "csv"
    if suffix in YAML_SUFFIXES:
        return "yaml"
    raise TraceError(f"{path}: unknown format; use a .csv (openb) or .yaml/.yml file")


def _unique(names: list[str], path: Path, kind: str) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise TraceError(f"{path}: {kind} {quote(name)} is listed twice")
        seen.add(name)


def read_nodes(path: Path) -> list[TraceNode]:
    """Nodes from an openb CSV or native YAML file; names must be unique."""
    try:
        nodes = read_nodes_csv(path) if _format(path) == "csv" else read_nodes_yaml(path)
    except OSError as error:
        raise TraceError(f"{path}: {error.strerror or error}") from error
    _unique([n.name for n in nodes], path, "node")
    return nodes


def read_pods(path: Path) -> list[TracePod]:
    """Pods from an openb CSV or native YAML file; names must be unique."""
    try:
        pods = read_pods_csv(path) if _format(path) == "csv" else read_pods_yaml(path)
    except OSError as error:
        raise TraceError(f"{path}: {error.strerror or error}") from error
    _unique([p.name for p in pods], path, "pod")
    return pods
