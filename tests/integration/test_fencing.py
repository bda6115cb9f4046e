"""A stale leader never writes: two scheduler processes, the leader frozen (SIGSTOP) right after it
placed a pod and kept frozen until the other one has taken the Lease over and bound pods, then
resumed (SIGCONT). Audited from both sides: each replica's own write log (no binding sent between
its freeze and its next term) and the cluster (no GPU index bound to two pods, no node bound past
its GPUs), with the shipped fencing policy (manifests/fencing-policy.yaml) installed, as in a real
deployment: the client-side fence cannot stop a write frozen between its last check and the socket;
the policy refuses it on the server. The policy's own test replays exactly that write. Also: the
leader reports a GPU conflict it finds among bound pods."""

from __future__ import annotations

import asyncio
import json
import random
import signal
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
from kubernetes_asyncio import client

from hack.localcluster import G2_EXPANSION, LocalCluster
from hack.localcluster.cluster import free_port
from scheduler.kube.apierrors import APIError
from scheduler.kube.binding import bind_pod, with_lease_term
from scheduler.kube.client import FencedApiClient
from scheduler.kube.eviction import EvictionResult, evict_pod
from scheduler.kube.fence import LEASE_TERM_ANNOTATION, WriteFence, lease_term
from tests.fencing_policy import fencing_policy
from tests.integration.test_scheduler_processes import SchedulerProcess
from tests.kube import eventually
from tests.scheduling import gpus_of, isolated, make_nodes, our_pod, running_daemon, settings_for

ROUNDS = 8
SEED = 20261126
NODES, GPUS_PER_NODE, GPUS_PER_POD = 2, 8, 2
SLOTS = NODES * GPUS_PER_NODE // GPUS_PER_POD
LAST = 2
"""Pods placed last by the leader that is frozen, and urgent pods created while it is frozen."""
FREEZE_DELAY_S = 0.004
LEASE = {"leaseDurationSeconds": 8, "renewDeadlineSeconds": 6, "retryPeriodSeconds": 0.5}
"""binding.timeoutSeconds keeps its default, which must fit the Lease (5 s <= 6 - 0.5)."""


def _config(namespace: str) -> dict[str, Any]:
    return {
        "schedulerName": namespace,
        "metricsAddress": f"127.0.0.1:{free_port()}",
        "backoff": {"initialSeconds": 0.2, "maxSeconds": 1.0},
        "leaderElection": {
            "enabled": True,
            "leaseName": "gpu-scheduler",
            "leaseNamespace": namespace,
            **LEASE,
        },
    }


def _records(process: SchedulerProcess) -> list[dict[str, Any]]:
    found = []
    for line in process.log_path.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and "event" in record:
            found.append(record)
    return found


def _time(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC).timestamp()


@dataclass
class Freeze:
    """One round: who was frozen, when (wall clock), and what the cluster held afterwards."""

    round: int
    replica: str
    stopped_at: float
    resumed_at: float = 0.0
    double_booked: list[str] = field(default_factory=list)


def _double_booked(pods: list[dict[str, Any]]) -> list[str]:
    """Every GPU index bound to two pods, and every node bound past its GPUs, as text."""
    holders: dict[tuple[str, int], list[str]] = defaultdict(list)
    per_node: dict[str, int] = defaultdict(int)
    for pod in pods:
        node = pod["spec"]["nodeName"]
        for index in gpus_of(pod):
            holders[(node, index)].append(pod["metadata"]["name"])
        per_node[node] += len(gpus_of(pod))
    found = [f"{n} GPU {i}: {sorted(p)}" for (n, i), p in sorted(holders.items()) if len(p) > 1]
    found += [f"{n}: {k} GPUs bound" for n, k in sorted(per_node.items()) if k > GPUS_PER_NODE]
    return found


async def _bound_pods(core: client.CoreV1Api, namespace: str) -> list[dict[str, Any]]:
    response = await core.list_namespaced_pod(namespace, _preload_content=False)
    pods: list[dict[str, Any]] = json.loads(await response.read())["items"]
    return [p for p in pods if p["spec"].get("nodeName")]


def _freeze_after_placement(
    process: SchedulerProcess, prefix: str, delay_s: float, limit_s: float = 60.0
) -> None:
    """SIGSTOP `process` `delay_s` after it logs `pod_placed` for a pod named `prefix*`.
    Blocking on purpose: the point is to react within a millisecond or two."""
    deadline = time.monotonic() + limit_s
    with process.log_path.open("rb") as log:
        buffered = b""
        while time.monotonic() < deadline:
            chunk = log.read()
            if not chunk:
                time.sleep(0.0005)
                continue
            buffered += chunk
            *lines, buffered = buffered.split(b"\n")
            for line in lines:
                if b'"pod_placed"' in line and f"/{prefix}".encode() in line:
                    time.sleep(delay_s)
                    process.process.send_signal(signal.SIGSTOP)
                    return
    raise TimeoutError(f"{process.name} placed no {prefix}* pod within {limit_s:.0f} s")


def _stale_writes(process: SchedulerProcess, freezes: list[Freeze]) -> list[dict[str, Any]]:
    """Bindings `process` sent after one of its freezes began and before its next term."""
    records = _records(process)
    elected = sorted(_time(r["timestamp"]) for r in records if r["event"] == "leader_elected")
    stale = []
    for freeze in (f for f in freezes if f.replica == process.name):
        next_term = next((t for t in elected if t > freeze.stopped_at), float("inf"))
        for record in records:
            if record["event"] not in ("write_done", "write_failed"):
                continue
            if not str(record.get("path", "")).endswith("/binding") or not record.get("sent_at"):
                continue
            if freeze.stopped_at <= _time(record["sent_at"]) < next_term:
                stale.append({"round": freeze.round, **record})
    return stale


async def _create(core: client.CoreV1Api, namespace: str, names: list[str], **kwargs: Any) -> None:
    for name in names:
        pod = our_pod(namespace, name, GPUS_PER_POD, **kwargs)
        await core.create_namespaced_pod(namespace, pod)


async def _freeze_round(
    core: client.CoreV1Api,
    namespace: str,
    leader: SchedulerProcess,
    other: SchedulerProcess,
    freeze: Freeze,
    holder: Callable[[str], Awaitable[str | None]],
    urgent: str,
    rng: random.Random,
) -> None:
    """One round (see the module docstring):

    1. filler pods take all but `LAST` slots of the nodes, bound by `leader`;
    2. `LAST` more pods arrive; `leader` is frozen a few ms (seeded) after it places one;
    3. while it is frozen, `LAST` pods of the higher PriorityClass `urgent` arrive: once `other`
       leads it places them first, on the GPUs the frozen leader chose for its last pods;
    4. `leader` is resumed, its stale work (if any) lands, the cluster is checked, pods deleted.
    """
    prefix = f"r{freeze.round}-"
    fillers = [f"{prefix}fill-{i}" for i in range(SLOTS - LAST)]
    await _create(core, namespace, fillers)

    async def filled() -> bool:
        return len(await _bound_pods(core, namespace)) == len(fillers)

    await eventually(filled, what="the filler pods bound")
    last_task = asyncio.create_task(
        _create(core, namespace, [f"{prefix}last-{i}" for i in range(LAST)])
    )
    await asyncio.sleep(0)  # the first create is under way
    await asyncio.to_thread(
        _freeze_after_placement, leader, f"{prefix}last-", rng.uniform(0.0, FREEZE_DELAY_S)
    )
    freeze.stopped_at = time.time()
    await last_task
    urgent_pods = [f"{prefix}urgent-{i}" for i in range(LAST)]
    try:
        await _create(core, namespace, urgent_pods, priority_class=urgent)
        await eventually(lambda: holder(leader.name), what="the takeover")

        async def tried_all() -> bool:
            done = {
                r["pod"]
                for r in _records(other)
                if r["event"] in ("pod_bound", "pod_unschedulable", "bind_failed")
            }
            return all(f"{namespace}/{name}" in done for name in urgent_pods)

        await eventually(tried_all, what=f"{other.name} trying the urgent pods")
        await asyncio.sleep(1.0)  # let its binds finish
    finally:
        leader.process.send_signal(signal.SIGCONT)
        freeze.resumed_at = time.time()
    await asyncio.sleep(3.0)  # the resumed replica does whatever it still had in flight
    freeze.double_booked = _double_booked(await _bound_pods(core, namespace))
    await core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)

    async def emptied() -> bool:
        response = await core.list_namespaced_pod(namespace, _preload_content=False)
        return not json.loads(await response.read())["items"]

    await eventually(emptied, what="the round's pods deleted")


async def test_a_frozen_leader_never_binds_after_another_took_over(
    cluster: LocalCluster,
    core_api: client.CoreV1Api,
    namespace: str,
    tmp_path: Path,
) -> None:
    rng = random.Random(SEED)
    await make_nodes(core_api, [isolated(G2_EXPANSION, namespace, count=NODES)])
    replicas = {
        name: SchedulerProcess(cluster, _config(namespace), tmp_path, name)
        for name in ("alpha", "beta")
    }
    coordination = client.CoordinationV1Api(core_api.api_client)
    scheduling = client.SchedulingV1Api(core_api.api_client)
    urgent = f"{namespace}-urgent"[:60]
    await scheduling.create_priority_class({"metadata": {"name": urgent}, "value": 1000})

    async def holder(not_: str = "") -> str | None:
        """The Lease's holder, if it is one of ours other than `not_`."""
        try:
            lease = await coordination.read_namespaced_lease("gpu-scheduler", namespace)
        except client.ApiException:
            return None
        name = lease.spec.holder_identity or None
        return name if name in replicas and name != not_ else None

    freezes: list[Freeze] = []
    await eventually(holder, what="a first leader (the policy's parameter is its Lease)")
    async with fencing_policy(core_api.api_client, namespace):
        await _frozen_rounds(core_api, namespace, replicas, freezes, holder, urgent, rng)
    await scheduling.delete_priority_class(urgent)

    stale = [w for p in replicas.values() for w in _stale_writes(p, freezes)]
    violated = [f for f in freezes if f.double_booked]
    fenced = sum(len(p.events("write_fenced")) for p in replicas.values())
    refused = [r for p in replicas.values() for r in _records(p) if "current term is" in str(r)]
    summary = (
        f"{len(freezes)} rounds; rounds with a double-booked node: {len(violated)}; "
        f"stale binding writes: {len(stale)}; writes fenced off: {fenced}; "
        f"refused by the server's fencing policy: {len(refused)}"
    )
    print(summary)
    assert not violated, f"{summary}: " + "; ".join(
        f"round {f.round} ({f.replica} frozen): {f.double_booked}" for f in violated
    )
    assert not stale, f"{summary}: {stale}"


async def _frozen_rounds(
    core_api: client.CoreV1Api,
    namespace: str,
    replicas: dict[str, SchedulerProcess],
    freezes: list[Freeze],
    holder: Callable[[str], Awaitable[str | None]],
    urgent: str,
    rng: random.Random,
) -> None:
    """`ROUNDS` rounds of `_freeze_round`, each freezing whichever replica leads then; both
    replicas are resumed and stopped at the end, whatever happened."""
    try:
        for number in range(ROUNDS):
            leader = replicas[await eventually(holder, what="a leader")]
            other = next(p for p in replicas.values() if p is not leader)
            freeze = Freeze(number, leader.name, 0.0)
            freezes.append(freeze)
            await _freeze_round(core_api, namespace, leader, other, freeze, holder, urgent, rng)
    finally:
        for process in replicas.values():
            process.process.send_signal(signal.SIGCONT)
            process.stop()


async def _dry_run_refused(core: client.CoreV1Api, namespace: str, name: str) -> bool:
    """Whether the API server refuses a dry-run Binding of `name` sent in `core`'s Lease term
    (admission runs for dry-run requests; nothing is bound)."""
    body = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "annotations": with_lease_term(core, {}),
        },
        "target": {"apiVersion": "v1", "kind": "Node", "name": "node-a"},
    }
    try:
        await core.create_namespaced_pod_binding(name, namespace, body, dry_run="All")
    except client.ApiException as error:
        return "current term is" in str(error.body)
    return False


async def test_the_server_refuses_a_binding_or_eviction_sent_in_a_term_that_is_over(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str
) -> None:
    """The write the client-side fence cannot stop: admitted while the term was open, it reaches
    the API server after another replica took the Lease over (here the takeover is written while
    the fence still believes it leads, as a replica frozen after its last check would). The
    shipped policy refuses it; a Binding of the current term passes and is stamped with it."""
    coordination = client.CoordinationV1Api(core_api.api_client)
    lease = {
        "metadata": {"name": "gpu-scheduler", "namespace": namespace},
        "spec": {"holderIdentity": "alpha", "leaseDurationSeconds": 15, "leaseTransitions": 4},
    }
    await coordination.create_namespaced_lease(namespace, lease)
    for name in ("current", "stale"):
        pod = our_pod(namespace, name, 1, scheduler_name="nobody")
        await core_api.create_namespaced_pod(namespace, pod)
    fence = WriteFence()
    fence.arm(lease_duration=15.0, margin=2.0)
    fence.renewed(time.monotonic(), lease_term(namespace, "gpu-scheduler", "alpha", 4))
    configuration = core_api.api_client.configuration
    async with (
        fencing_policy(core_api.api_client, namespace),
        FencedApiClient(configuration, fence) as api,
    ):
        alpha = client.CoreV1Api(api)
        await bind_pod(alpha, namespace, "current", "", "node-a", {}, timeout=10.0)
        bound = await core_api.read_namespaced_pod("current", namespace)
        assert bound.spec.node_name == "node-a"
        assert bound.metadata.annotations[LEASE_TERM_ANNOTATION] == fence.term

        taken = await coordination.read_namespaced_lease("gpu-scheduler", namespace)
        taken.spec.holder_identity, taken.spec.lease_transitions = "beta", 5
        await coordination.replace_namespaced_lease("gpu-scheduler", namespace, taken)
        assert fence.remaining() > 0, "the fence still lets alpha's writes out"
        # The server judges against its own watch of the Lease, which follows the takeover after
        # a watch delay (docs/reliability.md); on a loaded machine that can take longer than the
        # next request. Wait until a dry-run Binding of the old term is refused, then send it.
        await eventually(
            lambda: _dry_run_refused(alpha, namespace, "stale"),
            what="the API server's fencing policy sees the takeover",
        )

        try:
            await bind_pod(alpha, namespace, "stale", "", "node-a", {}, timeout=10.0)
        except APIError as refused:
            message = str(refused)
        else:
            message = "bound"
        result, why = await evict_pod(alpha, namespace, "current", "")
    stale = await core_api.read_namespaced_pod("stale", namespace)
    assert stale.spec.node_name is None, "a Binding of a term that is over was accepted"
    assert "alpha/4" in message and "current term is" in message and "beta/5" in message
    assert result is EvictionResult.FAILED and "current term is" in why
    still = await core_api.read_namespaced_pod("current", namespace)
    assert still.metadata.deletion_timestamp is None


async def test_the_leader_reports_pods_bound_to_the_same_gpus(
    cluster: LocalCluster,
    core_api: client.CoreV1Api,
    namespace: str,
) -> None:
    (node,) = await make_nodes(core_api, [isolated(G2_EXPANSION, namespace)])
    for name, gpus in (("first", "0,1"), ("second", "1,2")):  # bound by hand, sharing GPU 1
        await core_api.create_namespaced_pod(
            namespace, our_pod(namespace, name, 2, scheduler_name="nobody")
        )
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "annotations": {"gpu-scheduler.io/gpus": gpus}},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        await core_api.create_namespaced_pod_binding(
            name, namespace, binding, _preload_content=False
        )
    events = client.EventsV1Api(core_api.api_client)

    async def conflict_event() -> dict[str, Any] | None:
        response = await events.list_namespaced_event(
            "default", field_selector=f"regarding.name={node}", _preload_content=False
        )
        items = json.loads(await response.read())["items"]
        return next((e for e in items if e["reason"] == "GPUConflict"), None)

    async with running_daemon(cluster, settings_for(namespace)) as daemon:
        event = await eventually(conflict_event, what="a GPUConflict event on the node")
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{daemon.http_port}/metrics") as response,
        ):
            metrics = await response.text()
    assert event["type"] == "Warning"
    assert f"1 ({namespace}/first, {namespace}/second)" in event["note"]
    assert "\ngpu_scheduler_gpu_conflicts_total 1.0\n" in metrics
