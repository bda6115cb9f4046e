"""Cluster-wide invariants the scheduler must keep under any fault: pure functions over pods and
nodes as the API returns them (JSON-shaped dicts) and over the scheduler's JSON log records.

Every check returns a list of `Violation`s (empty: the invariant holds). The checks are an oracle
written independently of the scheduler's own cache, so a bug there cannot hide itself here:

| invariant          | holds when                                                                 |
|--------------------|----------------------------------------------------------------------------|
| `over_capacity`    | on every node, the requests of the pods bound to it (every scheduler's,     |
|                    | terminating ones included, finished ones not) fit its allocatable: GPUs,  |
|                    | MIG slices, cpu, memory and the pod count                                  |
| `gpu_shared`       | no two such pods on a node name the same index in `gpu-scheduler.io/gpus`, |
|                    | and every index is below the node's GPU count                              |
| `bound_twice`      | each pod is bound at most once by all schedulers' `pod_bound` log lines    |
| `bound_elsewhere`  | a pod's `pod_bound` line names the node the API server has it on           |
| `fitting_pending`  | at rest, no pending pod of ours fits the free capacity of a node it may    |
|                    | use (its nodeSelector, taints, unschedulable)                              |
| `bad_eviction`     | every evicted pod had a valid reclaim policy its preemptor's priority met, |
|                    | was past its toleration, was not busy (its scripted usage below the        |
|                    | threshold) and no PodDisruptionBudget forbade its eviction                 |
| `reserved_gpus`    | at rest, the GPUs a scheduler counts allocated on each node (its           |
|                    | `gpu_scheduler_node_gpus` metric) are exactly those of the pods the API    |
|                    | server has bound there: none stays reserved for a pod not in flight        |

Pod names are never reused by the fault workloads, so a pod's `namespace/name` (the key the
scheduler logs) identifies one UID.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from scheduler.model.quantity import QuantityError, parse_quantity

Obj = Mapping[str, Any]
"""A Kubernetes object as the API returns it (JSON)."""

GPU_RESOURCE = "nvidia.com/gpu"
MIG_PREFIX = "nvidia.com/mig-"
GPU_ANNOTATION = "gpu-scheduler.io/gpus"
USAGE_ANNOTATION = "fake-dcgm.gpu-scheduler.io/usage"
POLICY_PREFIX = "reclaim-idle-resource.scheduling.x-k8s.io/"
MIN_PRIORITY = POLICY_PREFIX + "minimum-preemptable-priority"
TOLERATION = POLICY_PREFIX + "toleration-seconds"
IDLE_SECONDS = POLICY_PREFIX + "resource-idle-seconds"
IDLE_THRESHOLD = POLICY_PREFIX + "resource-idle-usage-threshold"
POLICY_KEYS = (MIN_PRIORITY, TOLERATION, IDLE_SECONDS, IDLE_THRESHOLD)
CHECKED = ("cpu", "memory", "pods", GPU_RESOURCE)
"""Resources checked on every node, besides every `nvidia.com/mig-*` the node or a pod names."""
FINISHED = ("Succeeded", "Failed")


@dataclass(frozen=True)
class Violation:
    """One broken invariant: its name (see the module table), the node or pod, and the facts."""

    invariant: str
    subject: str
    detail: str

    def __str__(self) -> str:
        return f"{self.invariant}: {self.subject}: {self.detail}"


# -- reading pods and nodes ------------------------------------------------------------------------


def key_of(pod: Obj) -> str:
    meta = pod["metadata"]
    return f"{meta.get('namespace', '')}/{meta['name']}"


def holds_resources(pod: Obj) -> bool:
    """Bound to a node and not finished (a terminating pod still holds what it asked for)."""
    phase = (pod.get("status") or {}).get("phase")
    return bool(pod["spec"].get("nodeName")) and phase not in FINISHED


def _amount(name: str, value: object) -> Decimal:
    """CPU in millicores, everything else in base units."""
    try:
        number = parse_quantity(value)  # type: ignore[arg-type]
    except QuantityError:
        return Decimal(0)
    return number * 1000 if name == "cpu" else number


def _container_requests(container: Obj) -> dict[str, Decimal]:
    """A container's requests; an extended resource given only as a limit requests that much
    (the API server defaults requests to limits)."""
    resources = container.get("resources") or {}
    found = {k: _amount(k, v) for k, v in (resources.get("limits") or {}).items()}
    found.update({k: _amount(k, v) for k, v in (resources.get("requests") or {}).items()})
    return found


def pod_requests(pod: Obj) -> dict[str, Decimal]:
    """The effective request of a pod, as kube-scheduler counts it: the sum over containers, at
    least the largest init container, plus the pod overhead; `pods` is 1."""
    spec = pod["spec"]
    total: dict[str, Decimal] = defaultdict(Decimal)
    for container in spec.get("containers") or []:
        for name, value in _container_requests(container).items():
            total[name] += value
    for container in spec.get("initContainers") or []:
        for name, value in _container_requests(container).items():
            total[name] = max(total[name], value)
    for name, value in (spec.get("overhead") or {}).items():
        total[name] += _amount(name, value)
    total["pods"] = Decimal(1)
    return dict(total)


def allocatable(node: Obj) -> dict[str, Decimal]:
    raw = (node.get("status") or {}).get("allocatable") or {}
    return {name: _amount(name, value) for name, value in raw.items()}


def gpu_indices(pod: Obj) -> list[int] | None:
    """Indices in the GPU annotation; None when it is absent or malformed."""
    text = ((pod["metadata"].get("annotations") or {}).get(GPU_ANNOTATION) or "").strip()
    if not text:
        return None
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        return None


def _by_node(pods: Iterable[Obj]) -> dict[str, list[Obj]]:
    grouped: dict[str, list[Obj]] = defaultdict(list)
    for pod in pods:
        if holds_resources(pod):
            grouped[pod["spec"]["nodeName"]].append(pod)
    return grouped


def _checked_resources(node_alloc: Mapping[str, Decimal], used: Mapping[str, Decimal]) -> set[str]:
    mig = {name for name in (*node_alloc, *used) if name.startswith(MIG_PREFIX)}
    return set(CHECKED) | mig


def served_by_claim(pod: Obj) -> set[str]:
    """Extended resources of `pod` served through DRA: those its
    `status.extendedResourceClaimStatus` maps to a request of its claim. Such a request takes
    devices, not the node's allocatable (kube-scheduler's NodeResourcesFit skips it too), and the
    claim's devices are checked by `hack.faults.dra_invariants`."""
    status = (pod.get("status") or {}).get("extendedResourceClaimStatus") or {}
    return {str(m.get("resourceName")) for m in status.get("requestMappings") or ()}


def used_on_nodes(pods: Iterable[Obj]) -> dict[str, dict[str, Decimal]]:
    """Requests of the resource-holding pods, summed per node."""
    used: dict[str, dict[str, Decimal]] = {}
    for node, on_node in _by_node(pods).items():
        total: dict[str, Decimal] = defaultdict(Decimal)
        for pod in on_node:
            served = served_by_claim(pod)
            for name, value in pod_requests(pod).items():
                if name not in served:
                    total[name] += value
        used[node] = dict(total)
    return used


# -- invariants over one state of the cluster ------------------------------------------------------


def check_capacity(pods: Iterable[Obj], nodes: Iterable[Obj]) -> list[Violation]:
    """`over_capacity`: every node's bound requests fit its allocatable. Pods bound to a node that
    no longer exists are not counted (nothing is over-committed there)."""
    violations = []
    used = used_on_nodes(pods)
    for node in nodes:
        name = node["metadata"]["name"]
        have = allocatable(node)
        need = used.get(name, {})
        for resource in sorted(_checked_resources(have, need)):
            asked, room = need.get(resource, Decimal(0)), have.get(resource, Decimal(0))
            if asked > room:
                violations.append(
                    Violation(
                        "over_capacity", name, f"{resource}: {asked} bound > {room} allocatable"
                    )
                )
    return violations


def check_gpu_indices(pods: Iterable[Obj], nodes: Iterable[Obj]) -> list[Violation]:
    """`gpu_shared`: no GPU index is named by two resource-holding pods of one node, and none is
    past the node's GPU count."""
    counts = {n["metadata"]["name"]: int(allocatable(n).get(GPU_RESOURCE, 0)) for n in nodes}
    violations = []
    for node, on_node in sorted(_by_node(pods).items()):
        owners: dict[int, list[str]] = defaultdict(list)
        for pod in on_node:
            for index in gpu_indices(pod) or []:
                owners[index].append(key_of(pod))
        for index, keys in sorted(owners.items()):
            if len(keys) > 1:
                violations.append(
                    Violation("gpu_shared", node, f"GPU {index} held by {', '.join(sorted(keys))}")
                )
            if node in counts and not 0 <= index < counts[node]:
                violations.append(
                    Violation(
                        "gpu_shared", node, f"GPU {index} of {keys[0]} is not one of {counts[node]}"
                    )
                )
    return violations


def check_binds(records: Iterable[Obj], pods: Iterable[Obj]) -> list[Violation]:
    """`bound_twice` and `bound_elsewhere` over every scheduler's `pod_bound` records."""
    binds = [r for r in records if r.get("event") == "pod_bound"]
    times = Counter(str(r.get("pod")) for r in binds)
    violations = [
        Violation("bound_twice", key, f"{count} pod_bound records")
        for key, count in sorted(times.items())
        if count > 1
    ]
    where = {key_of(p): p["spec"].get("nodeName") for p in pods}
    for record in binds:
        key = str(record.get("pod"))
        actual = where.get(key)
        if actual and actual != record.get("node"):
            violations.append(
                Violation(
                    "bound_elsewhere", key, f"logged bound to {record.get('node')}, is on {actual}"
                )
            )
    return violations


def _tolerates(pod: Obj, taint: Obj) -> bool:
    for toleration in pod["spec"].get("tolerations") or []:
        if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
            continue
        if toleration.get("operator") == "Exists":
            if not toleration.get("key") or toleration["key"] == taint.get("key"):
                return True
        elif toleration.get("key") == taint.get("key") and toleration.get("value", "") == taint.get(
            "value", ""
        ):
            return True
    return False


def may_use(pod: Obj, node: Obj) -> bool:
    """The node passes the pod's nodeSelector, its NoSchedule/NoExecute taints are tolerated,
    and it is schedulable. (The fault workloads use no affinity terms.)"""
    labels = node["metadata"].get("labels") or {}
    selector = pod["spec"].get("nodeSelector") or {}
    if any(labels.get(k) != v for k, v in selector.items()):
        return False
    if (node.get("spec") or {}).get("unschedulable"):
        return False
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not _tolerates(pod, taint):
            return False
    return True


def fits_on(pod: Obj, node: Obj, used: Mapping[str, Decimal]) -> bool:
    have = allocatable(node)
    for resource, asked in pod_requests(pod).items():
        if asked and used.get(resource, Decimal(0)) + asked > have.get(resource, Decimal(0)):
            return False
    return True


def fitting_pending(
    pods: Sequence[Obj], nodes: Iterable[Obj], scheduler_names: Iterable[str]
) -> list[tuple[str, str]]:
    """(pending pod, a node it fits on) for each pending, not terminating pod of ours that fits
    the free capacity of some node it may use."""
    ours = set(scheduler_names)
    used = used_on_nodes(pods)
    node_list = list(nodes)
    found = []
    for pod in pods:
        if pod["spec"].get("schedulerName") not in ours or pod["spec"].get("nodeName"):
            continue
        if pod["metadata"].get("deletionTimestamp"):
            continue
        if (pod.get("status") or {}).get("phase") in FINISHED:
            continue
        for node in node_list:
            name = node["metadata"]["name"]
            if may_use(pod, node) and fits_on(pod, node, used.get(name, {})):
                found.append((key_of(pod), name))
                break
    return found


def check_fitting_bound(
    pods: Sequence[Obj], nodes: Iterable[Obj], scheduler_names: Iterable[str]
) -> list[Violation]:
    """`fitting_pending`: meant for the end of a bounded wait after the faults stop."""
    return [
        Violation("fitting_pending", key, f"pending, but fits on {node}")
        for key, node in fitting_pending(pods, nodes, scheduler_names)
    ]


def check_state(
    pods: Sequence[Obj], nodes: Sequence[Obj], records: Iterable[Obj] = ()
) -> list[Violation]:
    """Every invariant that must hold at any instant, even mid-fault."""
    return [
        *check_capacity(pods, nodes),
        *check_gpu_indices(pods, nodes),
        *check_binds(records, pods),
    ]


# -- evictions -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Eviction:
    """One pod the scheduler evicted: the pod as last seen before, when, and for whom."""

    victim: Obj
    evicted_at: float
    """Seconds since the epoch."""
    preemptor_priority: int | None


def parse_time(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def scheduled_at(pod: Obj) -> float | None:
    """When the pod was bound: its PodScheduled condition, else its start time."""
    status = pod.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "True":
            return parse_time(condition.get("lastTransitionTime"))
    return parse_time(status.get("startTime"))


def mean_usage(annotation: str | None) -> float | None:
    """The mean utilization (%) a fake-dcgm usage annotation scripts; 0 when absent, None for a
    shape whose mean is not known here (a trace replay)."""
    if not annotation:
        return 0.0
    kind, _, rest = annotation.partition(":")
    values: dict[str, float] = {}
    for part in rest.split(","):
        name, _, number = part.partition("=")
        try:
            values[name.strip()] = float(number)
        except ValueError:
            continue
    if kind == "constant" and "util" in values:
        return values["util"]
    if kind == "periodic" and {"duty", "level"} <= set(values):
        return values["duty"] * values["level"]
    return None


def _selects(selector: Obj | None, labels: Mapping[str, str]) -> bool:
    if not selector:
        return False
    match = selector.get("matchLabels") or {}
    if any(labels.get(k) != v for k, v in match.items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], expression.get("values")
        present = key in labels
        if operator == "In" and not (present and labels[key] in (values or [])):
            return False
        if operator == "NotIn" and present and labels[key] in (values or []):
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


def _healthy(pod: Obj) -> bool:
    status = pod.get("status") or {}
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    return (
        status.get("phase") == "Running" and ready and not pod["metadata"].get("deletionTimestamp")
    )


def _budget(value: object, expected: int, round_up: bool) -> int:
    if isinstance(value, int):
        return value
    text = str(value)
    if text.endswith("%"):
        share = float(text[:-1]) * expected / 100
        return math.ceil(share) if round_up else math.floor(share)
    return int(text)


def pdb_forbids(victim: Obj, pdbs: Iterable[Obj], pods: Iterable[Obj]) -> str | None:
    """The name of a PodDisruptionBudget that forbids evicting `victim`, judged on `pods` (the
    cluster as it was just before), or None."""
    namespace = victim["metadata"].get("namespace")
    labels = victim["metadata"].get("labels") or {}
    pod_list = list(pods)
    for pdb in pdbs:
        if pdb["metadata"].get("namespace") != namespace:
            continue
        selector = pdb["spec"].get("selector")
        if not _selects(selector, labels):
            continue
        covered = [
            p
            for p in pod_list
            if p["metadata"].get("namespace") == namespace
            and _selects(selector, p["metadata"].get("labels") or {})
        ]
        healthy = sum(1 for p in covered if _healthy(p))
        expected = len(covered)
        if "minAvailable" in pdb["spec"]:
            allowed = healthy - _budget(pdb["spec"]["minAvailable"], expected, round_up=True)
        elif "maxUnavailable" in pdb["spec"]:
            unavailable = expected - healthy
            allowed = _budget(pdb["spec"]["maxUnavailable"], expected, round_up=True) - unavailable
        else:
            continue
        if allowed < 1:
            return str(pdb["metadata"]["name"])
    return None


def _policy(priority_class: Obj | None) -> dict[str, float] | None:
    """The four reclaim-policy numbers of a PriorityClass; None without a complete, valid set."""
    if priority_class is None:
        return None
    annotations = priority_class["metadata"].get("annotations") or {}
    values = {}
    for key in POLICY_KEYS:
        try:
            values[key] = float(annotations[key])
        except (KeyError, ValueError):
            return None
    if (
        values[TOLERATION] < 0
        or values[IDLE_SECONDS] <= 0
        or not 0 <= values[IDLE_THRESHOLD] <= 100
    ):
        return None
    return values


def check_eviction(
    eviction: Eviction,
    priority_classes: Mapping[str, Obj],
    pdbs: Iterable[Obj] = (),
    pods_before: Iterable[Obj] = (),
) -> list[Violation]:
    """`bad_eviction` for one eviction; `priority_classes` by name."""
    victim = eviction.victim
    key = key_of(victim)
    class_name = victim["spec"].get("priorityClassName") or ""
    policy = _policy(priority_classes.get(class_name))
    if policy is None:
        return [Violation("bad_eviction", key, f"PriorityClass {class_name!r} has no valid policy")]
    found = []
    preemptor = eviction.preemptor_priority
    if preemptor is not None and preemptor < policy[MIN_PRIORITY]:
        found.append(
            Violation(
                "bad_eviction",
                key,
                f"preemptor priority {preemptor} < minimum {policy[MIN_PRIORITY]:g}",
            )
        )
    started = scheduled_at(victim)
    if started is None or eviction.evicted_at - started <= policy[TOLERATION]:
        ran = "unknown" if started is None else f"{eviction.evicted_at - started:.1f} s"
        found.append(
            Violation(
                "bad_eviction", key, f"within toleration {policy[TOLERATION]:g} s (ran {ran})"
            )
        )
    usage = mean_usage((victim["metadata"].get("annotations") or {}).get(USAGE_ANNOTATION))
    if usage is not None and usage >= policy[IDLE_THRESHOLD]:
        found.append(
            Violation(
                "bad_eviction", key, f"busy: usage {usage:g} % >= {policy[IDLE_THRESHOLD]:g} %"
            )
        )
    blocker = pdb_forbids(victim, pdbs, pods_before)
    if blocker is not None:
        found.append(Violation("bad_eviction", key, f"PodDisruptionBudget {blocker} forbade it"))
    return found


def check_evictions(
    evictions: Iterable[Eviction],
    priority_classes: Mapping[str, Obj],
    pdbs: Iterable[Obj] = (),
    pods_before: Iterable[Obj] = (),
) -> list[Violation]:
    pdb_list, before = list(pdbs), list(pods_before)
    return [v for e in evictions for v in check_eviction(e, priority_classes, pdb_list, before)]


# -- the scheduler's log ---------------------------------------------------------------------------

_JSON_START = re.compile(r"^\s*\{")


def read_records(path: Path) -> list[dict[str, Any]]:
    """The JSON records of one scheduler log (other lines skipped; a missing file is empty)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return []
    return list(parse_records(text.splitlines()))


def parse_records(lines: Iterable[str]) -> Iterator[dict[str, Any]]:
    for line in lines:
        if not _JSON_START.match(line):
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            yield record


def evictions_from_log(
    records: Iterable[Obj], pods_seen: Mapping[str, Obj]
) -> tuple[list[Eviction], list[Violation]]:
    """Evictions the scheduler logged (`reclaim_evict`, result `evicted`), joined with the last
    view of each victim and preemptor in `pods_seen` (by key). An evicted pod never seen is a
    violation of its own: nothing proves it was evictable."""
    evictions, unknown = [], []
    for record in records:
        if record.get("event") != "reclaim_evict" or record.get("result") != "evicted":
            continue
        key = str(record.get("pod"))
        victim = pods_seen.get(key)
        if victim is None:
            unknown.append(Violation("bad_eviction", key, "evicted pod never seen"))
            continue
        preemptor = pods_seen.get(str(record.get("preemptor")))
        priority = preemptor["spec"].get("priority") if preemptor is not None else None
        evicted_at = parse_time(record.get("timestamp")) or 0.0
        evictions.append(Eviction(victim, evicted_at, priority))
    return evictions, unknown


_POD_WRITE = re.compile(r"^/api/v1/namespaces/([^/]+)/pods/([^/]+)/(binding|eviction)$")
"""Path of a Binding or an Eviction: namespace, pod name, which."""


def _writes_sent(records: Sequence[Obj]) -> Iterator[tuple[float, str]]:
    """(sent_at, path) of every write a replica logged as having left the process
    (`write_done`, or `write_failed` with `sent`), in log order."""
    for record in records:
        if record.get("event") not in ("write_done", "write_failed"):
            continue
        if record.get("event") == "write_failed" and not record.get("sent"):
            continue
        at = parse_time(record.get("sent_at"))
        if at is not None:
            yield at, str(record.get("path", ""))


def check_stale_writes(records: Sequence[Obj], since: float) -> list[Violation]:
    """`stale_write`: in one replica's log, a write that left the process after `since` (the
    moment it resumed from a pause longer than its Lease) and before it was elected again, or a
    bind or eviction logged in that span whose request did not go out before `since`. A replica
    that was paused past its Lease has lost it, so nothing it sends until a new
    `leader_elected` may land; an answer to a request sent before the pause may still arrive."""
    elected = next(
        (
            at
            for record in records
            if record.get("event") == "leader_elected"
            and (at := parse_time(record.get("timestamp"))) is not None
            and at > since
        ),
        math.inf,
    )
    found = []
    in_term: set[str] = set()
    for at, path in _writes_sent(records):
        if at <= since:
            match = _POD_WRITE.match(path)
            if match:
                in_term.add(f"{match[1]}/{match[2]}")
        elif at < elected:
            found.append(Violation("stale_write", path, "sent after losing the Lease"))
    for record in records:
        at = parse_time(record.get("timestamp"))
        if at is None or at <= since:
            continue
        if record.get("event") == "leader_elected":
            break
        if str(record.get("pod")) in in_term:
            continue  # its request went out before the pause; the answer came after
        if record.get("event") == "pod_bound" or (
            record.get("event") == "reclaim_evict" and record.get("result") == "evicted"
        ):
            what = "bound" if record["event"] == "pod_bound" else "evicted"
            found.append(
                Violation("stale_write", str(record.get("pod")), f"{what} after losing the Lease")
            )
    return found


def pods_on_missing_nodes(
    pods: Iterable[Obj], nodes: Iterable[Obj], scheduler_names: Iterable[str]
) -> list[str]:
    """Keys of our pods bound to a node that does not exist."""
    existing = {n["metadata"]["name"] for n in nodes}
    ours = set(scheduler_names)
    return [
        key_of(p)
        for p in pods
        if p["spec"].get("schedulerName") in ours
        and p["spec"].get("nodeName")
        and p["spec"]["nodeName"] not in existing
    ]


def check_needless_evictions(records: Iterable[Obj], pods: Iterable[Obj]) -> list[Violation]:
    """`needless_eviction`: a pod evicted for a preemptor that, at rest, is not bound to the node
    the eviction made room on (still pending, or placed elsewhere). A preemptor deleted since
    proves nothing either way and is skipped."""
    where = {key_of(p): p["spec"].get("nodeName") for p in pods}
    found = []
    for record in records:
        if record.get("event") != "reclaim_evict" or record.get("result") != "evicted":
            continue
        preemptor = str(record.get("preemptor"))
        if preemptor not in where:
            continue
        landed = where[preemptor]
        if landed != record.get("node"):
            found.append(
                Violation(
                    "needless_eviction",
                    str(record.get("pod")),
                    f"evicted on {record.get('node')} for {preemptor}, which is "
                    + (f"on {landed}" if landed else "still pending"),
                )
            )
    return found


def check_reserved_gpus(
    allocated: Mapping[str, float], pods: Iterable[Obj], nodes: Iterable[Obj]
) -> list[Violation]:
    """`reserved_gpus`: per node that both the scheduler (`allocated`: node -> GPUs it counts
    allocated) and the API server know, the scheduler's count equals the whole GPUs held by the
    pods bound there (terminating ones included, finished ones not). Call it at rest, when no
    pod of that scheduler is in flight."""
    existing = {n["metadata"]["name"] for n in nodes}
    held = used_on_nodes(pods)
    found = []
    for node, counted in sorted(allocated.items()):
        if node not in existing:
            continue
        bound = held.get(node, {}).get(GPU_RESOURCE, Decimal(0))
        if Decimal(str(counted)) != bound:
            found.append(
                Violation(
                    "reserved_gpus",
                    node,
                    f"the scheduler counts {counted:g} GPUs allocated, bound pods hold {bound}",
                )
            )
    return found
