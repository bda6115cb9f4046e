"""DRA writes under faults, on the real API server: a device allocated to two ResourceClaims is
reported by the leader's conflict scan (the hazard when kube-scheduler and gpu-scheduler allocate
from one pool; here the admin writes both allocations), and the shipped fencing policy refuses
the claim allocation of a replica whose Lease term is over (docs/reliability.md, "A paused
leader")."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import aiohttp
from kubernetes_asyncio import client, config

from hack.localcluster import D8, LocalCluster
from hack.localcluster.dra import DRIVER
from scheduler.core.conflicts import DEVICE_REASON
from scheduler.kube.apierrors import APIError
from scheduler.kube.claims import allocate_and_reserve, allocation_json, release_claim
from scheduler.kube.client import FencedApiClient
from scheduler.kube.fence import LEASE_TERM_ANNOTATION, WriteFence, lease_term
from scheduler.model.allocations import Allocation
from scheduler.model.claims import parse_resource_claim
from tests.dra_objects import allocated, claim_spec, exact, request, resource_claim, result
from tests.fencing_policy import fencing_policy
from tests.integration.test_deployment_rbac import rbac_documents, scheduler_kubeconfig
from tests.kube import eventually
from tests.scheduling import isolated, make_nodes, our_pod, running_daemon, settings_for

Json = dict[str, Any]


def one_gpu() -> Json:
    return claim_spec(request("gpus", exact(DRIVER, count=1)))


async def allocate_by_hand(
    api: client.ApiClient, namespace: str, name: str, node: str, device: str
) -> None:
    """Create claim `name` and write its allocation of `device` (node `node`'s pool) as the
    admin, with no scheduler involved."""
    resource = client.ResourceV1Api(api)
    await resource.create_namespaced_resource_claim(
        namespace, cast(Any, resource_claim(name, namespace, one_gpu()))
    )
    status = allocated(result("gpus", device, pool=node), node=node)
    del status["allocation"]["devices"]["config"]  # the claim has no config to copy
    await resource.patch_namespaced_resource_claim_status(
        name, namespace, {"status": status}, _preload_content=False
    )


async def test_the_leader_reports_a_device_allocated_to_two_claims(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str
) -> None:
    api: client.ApiClient = getattr(core_api, "api_client")  # noqa: B009 (untyped attribute)
    [node] = await make_nodes(core_api, [isolated(D8, namespace)])
    for name in ("first", "second"):
        await allocate_by_hand(api, namespace, name, node, "gpu-3")
    events: Any = client.EventsV1Api(api)

    async def conflict_event() -> Json | None:
        response = await events.list_namespaced_event(
            "default", field_selector=f"regarding.name={node}", _preload_content=False
        )
        items = json.loads(await response.read())["items"]
        return next((e for e in items if e["reason"] == DEVICE_REASON), None)

    async with running_daemon(cluster, settings_for(namespace)) as daemon:
        event = await eventually(conflict_event, what="a DeviceConflict event on the node")
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{daemon.http_port}/metrics") as response,
        ):
            metrics = await response.text()
    assert event["type"] == "Warning"
    assert f"device {DRIVER}/{node}/gpu-3" in event["note"]
    assert f"{namespace}/first, {namespace}/second" in event["note"]
    assert "\ngpu_scheduler_gpu_conflicts_total 1.0\n" in metrics


# -- the fencing policy on ResourceClaims -------------------------------------------------------

LEASE = "gpu-scheduler"
"""The Lease `tests.fencing_policy` makes the policy read, in the test's namespace."""


def allocation_of(device: str) -> Allocation:
    """An allocation of `device` in pool "nowhere" (the API server does not check devices)."""
    status = allocated(result("gpus", device, pool="nowhere"), node=None)
    del status["allocation"]["devices"]["config"]
    claim = parse_resource_claim({**resource_claim("x", spec=one_gpu()), "status": status})
    assert claim.allocation is not None and not claim.errors, claim.errors
    return claim.allocation


async def read_claim(api: client.ApiClient, namespace: str, name: str) -> Json:
    resource: Any = client.ResourceV1Api(api)  # raw answers: typed as models by the client
    response = await resource.read_namespaced_resource_claim(
        name, namespace, _preload_content=False
    )
    body: Json = json.loads(await response.read())
    return body


async def take_over(api: client.ApiClient, namespace: str, holder: str, transitions: int) -> None:
    coordination = client.CoordinationV1Api(api)
    lease = await coordination.read_namespaced_lease(LEASE, namespace)
    lease.spec.holder_identity, lease.spec.lease_transitions = holder, transitions
    await coordination.replace_namespaced_lease(LEASE, namespace, lease)


def fence_in(namespace: str, holder: str, transitions: int) -> WriteFence:
    fence = WriteFence()
    fence.arm(lease_duration=15.0, margin=2.0)
    fence.renewed(time.monotonic(), lease_term(namespace, LEASE, holder, transitions))
    return fence


class PausedBeforeStatus:
    """A ResourceV1Api whose status writes wait for `resume` once the object write landed: a
    replica frozen between the finalizer write and the status write."""

    def __init__(self, api: client.ResourceV1Api) -> None:
        self.api = api
        self.api_client = getattr(api, "api_client")  # noqa: B009 (untyped attribute)
        self.stamped = asyncio.Event()
        self.resume = asyncio.Event()

    async def patch_namespaced_resource_claim(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await self.api.patch_namespaced_resource_claim(*args, **kwargs)
        finally:
            self.stamped.set()

    async def patch_namespaced_resource_claim_status(self, *args: Any, **kwargs: Any) -> Any:
        await self.resume.wait()
        return await self.api.patch_namespaced_resource_claim_status(*args, **kwargs)


async def write_claim(
    resource: Any, admin: client.ApiClient, namespace: str, name: str, device: str
) -> str:
    """Allocate `device` to claim `name` and reserve it for the pod `name` (which no scheduler
    binds) through `resource`, as the PreBind does; "" when it landed, else the error."""
    claim = parse_resource_claim(await read_claim(admin, namespace, name))
    body = await client.CoreV1Api(admin).read_namespaced_pod(name, namespace)
    pod = (name, str(body.metadata.uid))
    try:
        await allocate_and_reserve(
            resource, claim, allocation_of(device), pod, datetime.now(UTC), 10.0
        )
    except APIError as error:
        return str(error)
    return ""


async def test_the_server_refuses_a_claim_allocation_of_a_replica_whose_term_is_over(
    cluster: LocalCluster, core_api: client.CoreV1Api, namespace: str, tmp_path: Path
) -> None:
    """The writes of a replica that the client-side fence still admits (as after a freeze past
    its last check) but whose term the Lease no longer has, sent as the scheduler's
    ServiceAccount with the manifests' RBAC and the shipped policy:

    - a claim stamped and allocated in the current term passes (the status write is judged in
      the term stored on the object);
    - a replica paused between its finalizer write and its status write is refused the status
      write once another replica leads; the claim stays unallocated;
    - a finalizer write sent after the takeover is refused;
    - a status write cannot bring its own term: the annotations a status patch sends are
      dropped, the stored ones are judged (the new leader must stamp first, and then passes);
    - writes that are not a replica's allocation pass on a claim stamped in an old term: the
      replica releasing its reservation, the admin (kube-scheduler, the controller) clearing and
      writing an allocation."""
    admin: client.ApiClient = getattr(core_api, "api_client")  # noqa: B009 (untyped attribute)
    kubeconfig = await scheduler_kubeconfig(
        cluster, core_api, namespace, rbac_documents(namespace), tmp_path
    )
    coordination = client.CoordinationV1Api(admin)
    lease = {
        "metadata": {"name": LEASE, "namespace": namespace},
        "spec": {"holderIdentity": "alpha", "leaseDurationSeconds": 15, "leaseTransitions": 4},
    }
    await coordination.create_namespaced_lease(namespace, cast(Any, lease))
    resource_admin: Any = client.ResourceV1Api(admin)  # raw answers below
    for name in ("current", "paused", "late"):  # a claim and a pod, reserved for the pod
        await resource_admin.create_namespaced_resource_claim(
            namespace, cast(Any, resource_claim(name, namespace, one_gpu()))
        )
        pod = our_pod(namespace, name, 0, scheduler_name="nobody")
        await core_api.create_namespaced_pod(namespace, cast(Any, pod))
    configuration = client.Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    alpha_term = lease_term(namespace, LEASE, "alpha", 4)
    async with (
        fencing_policy(admin, namespace),
        FencedApiClient(configuration, fence_in(namespace, "alpha", 4)) as alpha_api,
        FencedApiClient(configuration, fence_in(namespace, "beta", 5)) as beta_api,
    ):
        alpha = client.ResourceV1Api(alpha_api)
        assert await write_claim(alpha, admin, namespace, "current", "gpu-0") == ""
        current = await read_claim(admin, namespace, "current")
        assert current["metadata"]["annotations"][LEASE_TERM_ANNOTATION] == alpha_term
        assert current["status"]["allocation"]["devices"]["results"][0]["device"] == "gpu-0"

        paused = PausedBeforeStatus(alpha)
        frozen = asyncio.create_task(write_claim(paused, admin, namespace, "paused", "gpu-1"))
        await asyncio.wait_for(paused.stamped.wait(), 10.0)
        await take_over(admin, namespace, "beta", 5)
        await asyncio.sleep(1.0)  # the API server's watch of the Lease follows
        paused.resume.set()
        refused_status = await frozen
        late = await write_claim(alpha, admin, namespace, "late", "gpu-2")

        beta: Any = client.ResourceV1Api(beta_api)  # a raw answer below
        beta_term = lease_term(namespace, LEASE, "beta", 5)
        smuggled = await resource_admin.read_namespaced_resource_claim(
            "paused", namespace, _preload_content=False
        )
        version = json.loads(await smuggled.read())["metadata"]["resourceVersion"]
        response = await beta.patch_namespaced_resource_claim_status(
            "paused",
            namespace,
            cast(
                Any,
                {
                    "metadata": {
                        "resourceVersion": version,
                        "annotations": {LEASE_TERM_ANNOTATION: beta_term},
                    },
                    "status": {
                        "allocation": allocation_json(allocation_of("gpu-1"), datetime.now(UTC))
                    },
                },
            ),
            _preload_content=False,
        )
        own_term_status, own_term_text = response.status, await response.text()
        restamped = await write_claim(beta, admin, namespace, "paused", "gpu-1")

        released = ""
        try:  # the stale replica's undo: a status write that allocates nothing
            claim = parse_resource_claim(await read_claim(admin, namespace, "current"))
            uid = claim.reserved_for[0].uid
            await release_claim(alpha, claim, claim.resource_version, uid, True, 10.0)
        except APIError as error:
            released = str(error)
        reallocated = await admin_allocates(resource_admin, namespace, "current", "gpu-3")

    assert "sent in Lease term " + alpha_term in refused_status, refused_status
    assert "current term is " + beta_term in refused_status
    paused_claim = await read_claim(admin, namespace, "paused")
    assert paused_claim["status"]["allocation"]["devices"]["results"][0]["device"] == "gpu-1"
    assert paused_claim["metadata"]["annotations"][LEASE_TERM_ANNOTATION] == beta_term
    assert "current term is" in late, late
    late_claim = await read_claim(admin, namespace, "late")
    assert "annotations" not in late_claim["metadata"]
    assert not late_claim.get("status") and not late_claim["metadata"].get("finalizers")
    assert own_term_status == 403 and f"sent in Lease term {alpha_term}" in own_term_text
    assert restamped == ""
    assert released == ""
    assert reallocated == 200


async def admin_allocates(resource: Any, namespace: str, name: str, device: str) -> int:
    """The admin (not a replica) writes an allocation of `device`: the status of the answer."""
    status = {"allocation": allocation_json(allocation_of(device), datetime.now(UTC))}
    response = await resource.patch_namespaced_resource_claim_status(
        name, namespace, cast(Any, {"status": status}), _preload_content=False
    )
    code = int(response.status)
    response.release()
    return code
