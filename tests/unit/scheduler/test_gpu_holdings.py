"""The GPUs a pod holds, device plugin and DRA together: claims reserved for it counted by
device, admin access and other drivers left out, an extended-resource request not counted twice;
and the places that weigh a pod's GPUs (accounting, reclaim victims) read that count."""

from __future__ import annotations

from reclaim.usage import idle_verdict
from scheduler.core.accounting_task import cache_holders
from scheduler.model.claims import ResourceClaim, parse_resource_claim
from scheduler.model.objects import parse_pod
from scheduler.state.cache import ClusterCache
from scheduler.state.dra import DraStore, reserved_gpu_devices
from scheduler.state.gpu_holdings import GpuHoldings, held_gpus
from scheduler.victims.candidates import Victim, victim_pod
from tests.dra_objects import allocated, pod_ref, resource_claim, result
from tests.unit.scheduler.builders import cluster, make_node, make_pod

GPU_DRIVERS = ("gpu.nvidia.com",)


def claim(name: str, devices: list[str], reserved: list[str]) -> ResourceClaim:
    results = [result("gpus", d) for d in devices]
    refs = [pod_ref(uid.removeprefix("uid-"), uid) for uid in reserved]
    return parse_resource_claim(resource_claim(name, status=allocated(*results, reserved_for=refs)))


def store_with(*claims: ResourceClaim) -> DraStore:
    store = DraStore()
    for one in claims:
        store.put_claim(one)
    return store


def test_devices_of_claims_reserved_for_a_pod_are_counted_once_each() -> None:
    two = claim("two", ["gpu-0", "gpu-1"], ["uid-a"])
    shared = claim("shared", ["gpu-2"], ["uid-a", "uid-b"])
    unreserved = claim("free", ["gpu-3"], [])
    store = store_with(two, shared, unreserved)
    assert store.gpu_devices_by_pod(GPU_DRIVERS) == {"uid-a": 3, "uid-b": 1}
    assert store.gpu_devices_of("uid-a", GPU_DRIVERS) == 3
    assert store.gpu_devices_of("uid-c", GPU_DRIVERS) == 0
    assert store.gpu_devices_of("uid-a", ()) == 0  # no GPU driver: no DRA GPU


def test_admin_access_other_drivers_and_shares_of_one_device_do_not_add_gpus() -> None:
    raw = resource_claim(
        "mixed",
        status=allocated(
            result("gpus", "gpu-0"),
            result("gpus", "gpu-1", adminAccess=True),
            result("gpus", "gpu-2", shareID="00000000-0000-4000-8000-000000000001"),
            result("gpus", "gpu-2", shareID="00000000-0000-4000-8000-000000000002"),
            {"request": "gpus", "driver": "nic.example.com", "pool": "node-a", "device": "nic-0"},
            reserved_for=[pod_ref("a", "uid-a")],
        ),
    )
    raw["spec"]["devices"]["requests"][0]["exactly"]["count"] = 5
    parsed = parse_resource_claim(raw)
    assert reserved_gpu_devices([parsed], GPU_DRIVERS) == {"uid-a": 2}  # gpu-0 and gpu-2
    assert reserved_gpu_devices([parsed], ("nic.example.com",)) == {"uid-a": 1}


def dra_cache() -> ClusterCache:
    """Node `dp` serves GPUs through the device plugin, node `dra` only through DRA."""
    cache = cluster(
        make_node("dp", gpus=8),
        make_node("dra", gpus=0),
        pods=[
            make_pod("plugin", gpus=2, node="dp", phase="Running"),
            make_pod("claims", gpus=0, node="dra", phase="Running"),
            make_pod("extended", gpus=2, node="dra", phase="Running"),
            make_pod("idle-cpu", gpus=0, node="dra", phase="Running"),
        ],
    )
    for one in (
        claim("claims-gpu", ["gpu-0", "gpu-1", "gpu-2"], ["uid-claims"]),
        claim("extended-gpus", ["gpu-4", "gpu-5"], ["uid-extended"]),
    ):
        cache.dra.put_claim(one)
    return cache


def test_a_request_served_through_dra_is_counted_by_its_claim_not_twice() -> None:
    cache = dra_cache()
    holdings = GpuHoldings(cache, GPU_DRIVERS)
    counts = {key: holdings.of(state.info, state.node) for key, state in cache.pods.items()}
    assert counts == {
        "default/plugin": 2,
        "default/claims": 3,
        "default/extended": 2,  # nvidia.com/gpu: 2 on a node without it: the claim's 2 devices
        "default/idle-cpu": 0,
    }
    unknown = parse_pod(make_pod("elsewhere", gpus=1, node="gone"))
    assert holdings.of(unknown, "gone") == 1
    assert held_gpus(unknown, device_plugin=False, dra_gpus=4) == 4
    assert held_gpus(unknown, device_plugin=True, dra_gpus=4) == 5


def test_accounting_counts_dra_holders_by_their_devices() -> None:
    holders = cache_holders(dra_cache(), GPU_DRIVERS)
    assert sorted((h.name, h.gpus, h.node) for h in holders) == [
        ("claims", 3, "dra"),
        ("extended", 2, "dra"),
        ("plugin", 2, "dp"),
    ]
    assert [h.name for h in cache_holders(dra_cache(), ())] == ["plugin"]


def test_a_victim_weighs_and_is_measured_with_the_gpus_it_holds() -> None:
    pod = parse_pod(make_pod("claims", gpus=0, node="dra", phase="Running"))
    victim = Victim(pod, "dra", (), gpu_count=3)
    assert victim.held_gpus == 3
    assert victim_pod(victim).gpus == 3
    assert Victim(parse_pod(make_pod("p", gpus=2)), "n", (0, 1)).held_gpus == 2
    verdict = idle_verdict([], 5.0, {}, scrape_interval_s=15.0, held_gpus=victim.held_gpus)
    assert not verdict.idle
