"""`gpu-scheduler explain` for a gang: the plan of a whole PodGroup, member by member.

    gpu-scheduler explain --pod NAMESPACE/MEMBER ...      (a pod with a PodGroup)
    gpu-scheduler explain --pod-group NAMESPACE/NAME ...
    gpu-scheduler explain --pod-file MEMBER.yaml --cluster DUMP.yaml   (DUMP with the PodGroup)

The daemon places a gang in one cycle (`scheduler.core.gang_cycle`, `_schedule_gang`); this module
rebuilds that cycle's inputs from plain API objects and runs the same `plan_gang` on them:

- the cache holds every Node and every bound, unfinished Pod (any scheduler), as the daemon's;
- `GangTracker` (the daemon's PreEnqueue bookkeeping) says whether the gang may be tried at all
  (its PodGroup exists, is valid, and at least minCount of its pods exist); if not, the plan is
  that message and nothing is placed;
- the candidates are the gang's pending members for our scheduler (schedulerName of the
  configuration, no scheduling gates); members already bound count towards minCount and pin the
  topology value, exactly as in the daemon's cycle.

What differs from the daemon: pods it has assumed but not yet bound are not visible here (they
look pending), and no reclaim or preemption is planned.

`explain_gang` is pure (plain JSON in, `GangExplanation` out); `read_gang` fetches the objects.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler.framework.runtime import Framework
from scheduler.gangs.planning import plan_gang
from scheduler.gangs.tracker import (
    COSCHEDULING_SOURCE,
    GangTracker,
    PodGroupInfo,
    gang_key,
    parse_coscheduling_group,
    parse_pod_group,
)
from scheduler.model.objects import COSCHEDULING_PREFIX, PodInfo, parse_node, parse_pod
from scheduler.state.cache import ClusterCache
from scheduler.tools.errors import EXIT_RUNTIME, CommandError
from scheduler.tools.explain_claims import add_dra_objects
from topology.text import clip

JsonObject = dict[str, Any]
MESSAGE_LIMIT = 1024
"""Characters of the verdict line, as the daemon's FailedScheduling message."""

BOUND, PLACED, UNPLACED, NOT_TRIED = "bound", "placed", "unplaced", "not tried"
"""Member states: bound already; placed by this plan; did not fit; not a candidate (gated, of
another scheduler, or the gang may not be tried yet)."""

TOO_FEW = "fits, but too few members fit with it: nothing is bound"
"""Reason of a member that found room in a plan that failed as a whole."""

V1BETA1 = ("scheduling.k8s.io", "v1beta1", "podgroups")
COSCHEDULING = ("scheduling.x-k8s.io", "v1alpha1", "podgroups")


@dataclass(frozen=True)
class MemberRow:
    """One member of the gang in the plan."""

    pod: str
    state: str
    node: str = ""
    gpus: tuple[int, ...] = ()
    domains: tuple[int, ...] = ()
    """NVLink domains of its GPUs on its node (one entry: inside one domain)."""
    reason: str = ""
    claims: tuple[str, ...] = ()
    """For a member placed by this plan: "claim: pool/device,..." per claim it would allocate
    (its GPUs when they come from DRA)."""

    def as_json(self) -> JsonObject:
        return {
            "pod": self.pod,
            "state": self.state,
            "node": self.node or None,
            "gpus": list(self.gpus),
            "nvlinkDomains": list(self.domains),
            "reason": self.reason,
            "claims": list(self.claims),
        }


@dataclass(frozen=True)
class GangExplanation:
    """The plan of one gang: `fits` says whether the daemon would bind it now."""

    group: str
    """namespace/name of the PodGroup."""
    source: str
    min_count: int
    topology_key: str
    fits: bool
    message: str
    """One line: the verdict (the daemon's FailedScheduling text when it does not fit)."""
    topology_value: str = ""
    members: list[MemberRow] = field(default_factory=list)

    def as_json(self) -> JsonObject:
        return {
            "podGroup": self.group,
            "source": self.source,
            "minCount": self.min_count,
            "topologyKey": self.topology_key or None,
            "topologyValue": self.topology_value or None,
            "fits": self.fits,
            "message": self.message,
            "members": [m.as_json() for m in self.members],
        }


def group_name(key: str) -> str:
    """The PodGroup's name in a gang key ("ns/name" or "ns/scheduling.x-k8s.io/name")."""
    return key.partition("/")[2].removeprefix(COSCHEDULING_PREFIX)


def _domains(cache: ClusterCache, node: str, gpus: tuple[int, ...]) -> tuple[int, ...]:
    info = cache.nodes.get(node)
    if info is None:
        return ()
    ids = info.topology.gpu_domain_ids()
    return tuple(sorted({ids[g] for g in gpus if 0 <= g < len(ids)}))


def _parse_group(key: str, obj: Mapping[str, Any] | None) -> PodGroupInfo | None:
    if obj is None:
        return None
    if key.partition("/")[2].startswith(COSCHEDULING_PREFIX):
        return parse_coscheduling_group(obj)
    return parse_pod_group(obj)


def _not_tried(pod: PodInfo, scheduler_name: str, default: str) -> str:
    if pod.scheduling_gates:
        return f"scheduling gates left: {clip(', '.join(pod.scheduling_gates))}"
    if pod.terminating or pod.finished:
        return "finished or terminating: does not count"
    if pod.scheduler_name != scheduler_name:
        return (
            f"schedulerName is {clip(pod.scheduler_name)}, not {scheduler_name}: "
            "another scheduler places it"
        )
    return default


def explain_gang(
    key: str,
    group_obj: Mapping[str, Any] | None,
    objects: Iterable[Mapping[str, Any]],
    framework: Framework,
    scheduler_name: str,
) -> GangExplanation:
    """The plan of gang `key` ("namespace/name", or "namespace/scheduling.x-k8s.io/name" for a
    coscheduling PodGroup) whose PodGroup is `group_obj` (None: it does not exist), against the
    Nodes and Pods of `objects` (plain API JSON); see the module docstring."""
    items = list(objects)
    cache = ClusterCache()
    for obj in items:
        if obj.get("kind") == "Node":
            cache.add_or_update_node(parse_node(obj))
    add_dra_objects(cache, items)
    tracker = GangTracker()
    group = _parse_group(key, group_obj)
    if group is not None:
        tracker.set_group(group)
    members: dict[str, PodInfo] = {}
    for obj in items:
        if obj.get("kind") != "Pod":
            continue
        pod = parse_pod(obj)
        if pod.bound:
            cache.add_pod(pod)
        pending = (
            pod.scheduler_name == scheduler_name
            and not pod.bound
            and not pod.terminating
            and not pod.finished
            and not pod.scheduling_gates
        )
        tracker.pod_seen(pod, pending)
        if gang_key(pod) == key:
            members[pod.key] = pod
    source = group.source if group is not None else _source_of(key)
    min_count = group.min_count if group is not None else 0
    topology_key = group.topology_key if group is not None else ""
    waiting = tracker.waiting(key)
    if group is None or waiting:
        rows = [
            MemberRow(p.name, NOT_TRIED, p.node_name, reason=_not_tried(p, scheduler_name, waiting))
            for p in sorted(members.values(), key=lambda p: p.key)
        ]
        return GangExplanation(key, source, min_count, topology_key, False, waiting, members=rows)
    existing = tracker.members(key)
    bound = sorted(k for k in existing if k in cache.pods)
    candidates = tracker.pending(key)
    need = max(group.min_count - len(bound), 0)
    pinned: set[str] = set()
    if group.topology_key:
        for member in bound:
            node = cache.nodes.get(cache.pods[member].node)
            value = node.labels.get(group.topology_key) if node is not None else None
            if value is not None:
                pinned.add(value)
    plan = plan_gang(cache, framework, list(candidates.values()), need, group.topology_key, pinned)
    rows_by_key: dict[str, MemberRow] = {}
    for member in bound:
        state = cache.pods[member]
        rows_by_key[member] = MemberRow(
            members[member].name if member in members else member.partition("/")[2],
            BOUND,
            state.node,
            tuple(state.gpus),
            _domains(cache, state.node, tuple(state.gpus)),
        )
    if plan.fits:
        for placed in plan.placed:
            rows_by_key[placed.pod.key] = MemberRow(
                placed.pod.name,
                PLACED,
                placed.node,
                placed.gpus,
                _domains(cache, placed.node, placed.gpus),
                claims=placed.claims.described() if placed.claims is not None else (),
            )
    for pod_key, reason in plan.unplaced.items():
        rows_by_key[pod_key] = MemberRow(candidates[pod_key].name, UNPLACED, reason=reason)
    if not plan.fits:
        for pod_key, pod in candidates.items():
            rows_by_key.setdefault(pod_key, MemberRow(pod.name, UNPLACED, reason=TOO_FEW))
    for pod_key, pod in members.items():
        rows_by_key.setdefault(
            pod_key,
            MemberRow(
                pod.name, NOT_TRIED, pod.node_name, reason=_not_tried(pod, scheduler_name, "")
            ),
        )
    rows = [rows_by_key[k] for k in sorted(rows_by_key)]
    where = (
        f" ({clip(group.topology_key)}={clip(plan.topology_value)})" if plan.topology_value else ""
    )
    if plan.fits:
        message = (
            f"gang {group.name} fits{where}: {len(plan.placed)} member(s) placed, "
            f"{len(bound)} bound before, minCount {group.min_count}"
        )
    else:
        reasons = "; ".join(sorted(set(plan.unplaced.values())))
        message = (
            f"gang {group.name}: only {len(bound) + plan.best} of minCount "
            f"{group.min_count} members fit: {reasons}"
        )
    if len(message) > MESSAGE_LIMIT:
        message = message[: MESSAGE_LIMIT - 24] + "... (truncated)"
    value = plan.topology_value if plan.fits else ""
    return GangExplanation(
        key, source, group.min_count, group.topology_key, plan.fits, message, value, rows
    )


def _source_of(key: str) -> str:
    if key.partition("/")[2].startswith(COSCHEDULING_PREFIX):
        return COSCHEDULING_SOURCE
    return "/".join(V1BETA1[:2])


def _cell(values: tuple[int, ...]) -> str:
    return ",".join(str(v) for v in values) if values else "-"


def render_gang(explanation: GangExplanation) -> str:
    """The header lines and one row per member."""
    e = explanation
    constraint = f", topology key {e.topology_key}" if e.topology_key else ""
    header = f"PodGroup {e.group.partition('/')[0]}/{group_name(e.group)} ({e.source}): "
    header += f"minCount {e.min_count}{constraint}" if e.min_count else "not found"
    lines = [["MEMBER", "STATE", "NODE", "GPUS", "NVLINK_DOMAINS", "REASON"]]
    for row in e.members:
        gpus = _cell(row.gpus) if row.gpus or not row.claims else "; ".join(row.claims)
        lines.append([row.pod, row.state, row.node or "-", gpus, _cell(row.domains), row.reason])
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    table = [
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in lines
    ]
    return "\n".join([header, e.message or "-", "", *table])


# -- reading the cluster ---------------------------------------------------------------------


def gang_of(pod_obj: Mapping[str, Any]) -> str:
    """The gang key of a pod's JSON, "" when it belongs to none."""
    return gang_key(parse_pod(pod_obj))


async def read_group(api_client: Any, key: str) -> JsonObject | None:
    """The PodGroup of gang `key` (v1beta1, or coscheduling for a prefixed key); None when the
    API server has no such object (or does not serve that API)."""
    from kubernetes_asyncio import client

    from scheduler.kube.apierrors import APINotFoundError, expect_success

    namespace = key.partition("/")[0]
    group, version, plural = (
        COSCHEDULING if key.partition("/")[2].startswith(COSCHEDULING_PREFIX) else V1BETA1
    )
    custom = client.CustomObjectsApi(api_client)
    response = await custom.get_namespaced_custom_object(
        group, version, namespace, plural, group_name(key), _preload_content=False
    )
    try:
        found: JsonObject = json.loads(await expect_success(response, f"reading PodGroup {key}"))
    except APINotFoundError:
        return None
    return found


async def find_group(api_client: Any, ref: str) -> tuple[str, JsonObject]:
    """Gang key and PodGroup for `--pod-group NAMESPACE/NAME`: the v1beta1 PodGroup, else the
    coscheduling one of that name; `CommandError` when neither exists."""
    namespace, _, name = ref.partition("/")
    for key in (f"{namespace}/{name}", f"{namespace}/{COSCHEDULING_PREFIX}{name}"):
        found = await read_group(api_client, key)
        if found is not None:
            return key, found
    raise CommandError(
        f"PodGroup {clip(ref)} not found (scheduling.k8s.io/v1beta1 nor {COSCHEDULING_SOURCE}); "
        f"list them with `kubectl get podgroups -n {clip(namespace)}`",
        EXIT_RUNTIME,
    )


def group_from_dump(key: str, objects: Iterable[Mapping[str, Any]]) -> JsonObject | None:
    """The PodGroup of gang `key` among the objects of a cluster dump, None when absent."""
    namespace, name = key.partition("/")[0], group_name(key)
    wanted = COSCHEDULING if key.partition("/")[2].startswith(COSCHEDULING_PREFIX) else V1BETA1
    for obj in objects:
        metadata = obj.get("metadata")
        if not isinstance(metadata, Mapping):
            continue
        api_group = str(obj.get("apiVersion") or "").partition("/")[0]
        if (
            obj.get("kind") == "PodGroup"
            and api_group == wanted[0]
            and metadata.get("namespace") == namespace
            and metadata.get("name") == name
        ):
            return dict(obj)
    return None
