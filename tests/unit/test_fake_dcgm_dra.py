"""GPUs held through DRA claims in the fake exporter: claims resolved like the kubelet, devices
matched to the node's GPUs by UUID (else index), every problem reported, never a crash."""

from __future__ import annotations

import copy
from typing import Any

from hack.fake_dcgm.dra_holders import claim_names, dra_holdings, gpu_nodes
from hack.fake_dcgm.exporter import Exporter
from hack.fake_dcgm.holders import Assignment, assign, is_fake_gpu_node
from hack.fake_dcgm.identity import gpu_uuid
from hack.fake_dcgm.render import GPU_UTIL
from hack.fake_dcgm.source import StaticSource, refresh_once
from hack.localcluster.dra import H200_GPU, node_resource_slice
from tests.unit.test_fake_dcgm_builders import USAGE, node, pod

Json = dict[str, Any]
NODE = "d8-0"


def dra_node(name: str = NODE) -> Json:
    """A kwok node publishing its GPUs through DRA: no nvidia.com/gpu capacity."""
    return node(name, gpus=0)


def slice_of(name: str = NODE, gpus: int = 8) -> Json:
    return node_resource_slice(name, f"uid-{name}", H200_GPU, gpus)


def dra_pod(name: str, node_name: str = NODE, template: bool = True, **kwargs: Any) -> Json:
    """A pod whose container `main` uses the pod claim `gpu` (from a template by default)."""
    obj = pod(name, node_name, gpus=0, **kwargs)
    entry: Json = {"name": "gpu"}
    if template:
        entry["resourceClaimTemplateName"] = "two-gpus"
        obj["status"]["resourceClaimStatuses"] = [
            {"name": "gpu", "resourceClaimName": f"{name}-gpu"}
        ]
    else:
        entry["resourceClaimName"] = f"{name}-gpu"
    obj["spec"]["resourceClaims"] = [entry]
    obj["spec"]["containers"][1]["resources"] = {"claims": [{"name": "gpu"}]}
    return obj


def claim(
    name: str,
    devices: list[str],
    reserved: list[str],
    namespace: str = "ns",
    pool: str = NODE,
    driver: str = "gpu.nvidia.com",
) -> Json:
    results = [{"request": "gpus", "driver": driver, "pool": pool, "device": d} for d in devices]
    return {
        "metadata": {"name": name, "namespace": namespace},
        "status": {
            "allocation": {"devices": {"results": results}},
            "reservedFor": [{"resource": "pods", "name": "x", "uid": uid} for uid in reserved],
        },
    }


def held(result: Assignment, node_name: str = NODE) -> dict[int, list[str]]:
    view = next(n for n in result.nodes if n.name == node_name)
    return {g.index: [h.pod for h in g.holders] for g in view.gpus if g.holders}


def test_template_claim_devices_are_held_at_their_uuid_indices_by_the_claiming_container() -> None:
    train = dra_pod("train")
    result = assign(
        [dra_node()],
        [train],
        [claim("train-gpu", ["gpu-2", "gpu-5"], ["uid-ns-train"])],
        [slice_of()],
    )
    assert result.problems == ()
    assert held(result) == {2: ["train"], 5: ["train"]}
    gpus = {g.index: g for g in result.nodes[0].gpus}
    assert len(gpus) == 8
    assert gpus[2].holders[0].container == "main"
    assert gpus[2].holders[0].uid == "uid-ns-train"


def test_the_series_carry_the_pod_labels_and_the_uuid_the_slice_publishes() -> None:
    exporter = Exporter()
    busy = dra_pod("busy", annotations={USAGE: "constant:util=40"})
    published = slice_of()
    uuids = {d["name"]: d["attributes"]["uuid"]["string"] for d in published["spec"]["devices"]}
    exporter.update(
        [dra_node()], [busy], 1e9, [claim("busy-gpu", ["gpu-6"], ["uid-ns-busy"])], [published]
    )
    body = exporter.metrics(1e9 + 1)
    lines = [
        line
        for line in body.splitlines()
        if line.startswith(GPU_UTIL.name) and 'pod="busy"' in line
    ]
    assert len(lines) == 1
    assert f'UUID="{uuids["gpu-6"]}"' in lines[0] and 'gpu="6"' in lines[0]
    assert 'container="main"' in lines[0] and 'namespace="ns"' in lines[0]
    assert lines[0].endswith(" 40")


def test_a_claim_named_directly_counts_and_one_not_reserved_for_the_pod_does_not() -> None:
    direct = dra_pod("direct", template=False)
    stranger = dra_pod("stranger")
    result = assign(
        [dra_node()],
        [direct, stranger],
        [
            claim("direct-gpu", ["gpu-0"], ["uid-ns-direct"]),
            claim("stranger-gpu", ["gpu-1"], ["uid-ns-someone-else"]),
        ],
        [slice_of()],
    )
    assert held(result) == {0: ["direct"]}
    assert result.problems == (
        "pod ns/stranger: ResourceClaim stranger-gpu is not reserved for it; it holds none of "
        "its devices",
    )


def test_missing_claims_foreign_devices_and_unknown_devices_are_problems_not_crashes() -> None:
    lost = dra_pod("lost")
    moved = dra_pod("moved")
    ghost = dra_pod("ghost")
    result = assign(
        [dra_node(), dra_node("d8-1")],
        [lost, moved, ghost],
        [
            claim("moved-gpu", ["gpu-1"], ["uid-ns-moved"], pool="d8-1"),
            claim("ghost-gpu", ["gpu-9"], ["uid-ns-ghost"]),
        ],
        [slice_of(), slice_of("d8-1")],
    )
    assert held(result) == {}
    assert held(result, "d8-1") == {}
    assert result.problems == (
        "pod ns/lost: ResourceClaim lost-gpu not found; it holds none of its devices",
        "pod ns/moved: ResourceClaim moved-gpu: device gpu.nvidia.com/d8-1/gpu-1 is on node "
        "d8-1, not on node d8-0; it is left out",
        "pod ns/ghost: ResourceClaim ghost-gpu: device gpu.nvidia.com/d8-0/gpu-9 is on no "
        "slice, not on node d8-0; it is left out",
    )


def test_uuid_decides_the_index_and_without_one_the_index_attribute_or_the_name() -> None:
    published = slice_of(gpus=4)
    devices = published["spec"]["devices"]
    devices[0]["attributes"]["uuid"]["string"] = gpu_uuid(NODE, 3)  # gpu-0 is GPU 3 by UUID
    devices[3]["attributes"]["uuid"]["string"] = gpu_uuid(NODE, 0)
    del devices[1]["attributes"]["uuid"]
    devices[1]["attributes"]["index"] = {"int": 2}  # by index attribute
    del devices[2]["attributes"]["uuid"]
    devices[2]["name"] = "gpu-1"  # by name
    pods = [dra_pod(f"p{i}") for i in range(4)]
    claims = [
        claim("p0-gpu", ["gpu-0"], ["uid-ns-p0"]),
        claim("p1-gpu", ["gpu-1"], ["uid-ns-p1"]),  # the renamed device: index 1
        claim("p2-gpu", ["gpu-3"], ["uid-ns-p2"]),
    ]
    result = assign([dra_node()], pods, claims, [published])
    assert held(result) == {3: ["p0"], 1: ["p1"], 0: ["p2"]}
    foreign = copy.deepcopy(published)
    foreign["spec"]["devices"][0]["attributes"]["uuid"]["string"] = gpu_uuid("elsewhere", 0)
    problems = dra_holdings(pods, claims, [foreign]).problems
    assert problems[0] == (
        f"node {NODE}: device gpu.nvidia.com/{NODE}/gpu-0 matches none of its 4 GPUs by uuid or "
        "index; it is left out"
    )


def test_extended_resource_claim_holds_through_its_request_mapping_not_the_fill_order() -> None:
    obj = pod("ext", NODE, gpus=2)
    obj["status"]["extendedResourceClaimStatus"] = {
        "resourceClaimName": "ext-extended-resources-abcde",
        "requestMappings": [
            {
                "containerName": "main",
                "resourceName": "nvidia.com/gpu",
                "requestName": "container-1-request-0",
            }
        ],
    }
    ext_claim = claim("ext-extended-resources-abcde", ["gpu-4", "gpu-7"], ["uid-ns-ext"])
    for result in ext_claim["status"]["allocation"]["devices"]["results"]:
        result["request"] = "container-1-request-0"
    result = assign([dra_node()], [obj], [ext_claim], [slice_of()])
    assert result.problems == ()  # no "requests 2 GPUs but only 0 are free"
    assert held(result) == {4: ["ext"], 7: ["ext"]}
    assert result.nodes[0].gpus[4].holders[0].container == "main"
    assert claim_names(obj) == [("", "ext-extended-resources-abcde")]


def test_admin_access_other_drivers_and_finished_pods_hold_nothing() -> None:
    watcher = dra_pod("watcher")
    admin = claim("watcher-gpu", ["gpu-0"], ["uid-ns-watcher"])
    admin["status"]["allocation"]["devices"]["results"][0]["adminAccess"] = True
    other = dra_pod("nic")
    done = dra_pod("done", phase="Succeeded")
    result = assign(
        [dra_node()],
        [watcher, other, done],
        [
            admin,
            claim("nic-gpu", ["nic-0"], ["uid-ns-nic"], driver="nic.example.com"),
            claim("done-gpu", ["gpu-1"], ["uid-ns-done"]),
        ],
        [slice_of()],
    )
    assert held(result) == {}
    assert result.problems == ()


def test_a_claim_not_yet_created_is_skipped_and_odd_objects_never_raise() -> None:
    waiting = dra_pod("waiting")
    waiting["status"]["resourceClaimStatuses"] = []
    assert claim_names(waiting) == []
    odd_pod = dra_pod("odd")
    odd_pod["spec"]["resourceClaims"] = [None, {"name": 3}, "x"]
    odd_pod["status"]["resourceClaimStatuses"] = "nope"
    odd_claims: list[Any] = [{"metadata": None}, {"status": {"allocation": {"devices": 1}}}]
    odd_slices: list[Any] = [
        {},
        {"spec": {"driver": "gpu.nvidia.com", "nodeName": NODE, "devices": [1]}},
    ]
    result = dra_holdings([waiting, odd_pod, {}], odd_claims, odd_slices)
    assert result.held == ()


async def test_refresh_serves_dra_nodes_found_through_their_slices() -> None:
    busy = dra_pod("busy", annotations={USAGE: "constant:util=40"})
    plain = node("plain", gpus=0)  # no GPUs anywhere: not served
    source = StaticSource(
        [dra_node(), plain], [busy], [claim("busy-gpu", ["gpu-1"], ["uid-ns-busy"])], [slice_of()]
    )
    assert gpu_nodes([slice_of()]) == frozenset({NODE})
    assert is_fake_gpu_node(dra_node(), {NODE}) and not is_fake_gpu_node(plain, {NODE})
    exporter = Exporter()
    assert await refresh_once(source, exporter, lambda: 1e9)
    assert {g.node for g in exporter.fleet.gpus} == {NODE}
    assert [g.index for g in exporter.fleet.gpus if g.holders] == [1]
