"""The demo's DRA step, its pure half (`hack.demo_dra`): kube-scheduler's first fit computed with
the allocator in upstream's order over the step's node as the local cluster publishes it, the
NVLink domains of its devices, the pods and claims the step creates, and what it prints."""

from __future__ import annotations

from typing import Any

from hack.demo_dra import (
    DRA_NODE,
    HOLDER,
    PAIR,
    POD_CLAIM,
    QUAD,
    STEP_LABEL,
    TABLE_HEADER,
    ClaimRow,
    claim_pod,
    claim_summary,
    claim_table,
    device_uuid,
    domain_cell,
    dra_store,
    first_fit,
    gpu_request,
    node_domains,
    resource_claim,
    step_pods,
    template_name,
    uuid_selector,
)
from hack.fake_dcgm.identity import gpu_uuid
from hack.localcluster.dra import DRIVER, gpu_device_class, node_resource_slice
from hack.localcluster.nodes import node_manifest
from scheduler.dra.allocator import Allocator
from scheduler.dra.cel import CelSelectors
from scheduler.model.claims import parse_resource_claim

NODE = "demo-dra-0"
Json = dict[str, Any]


def node() -> Json:
    return node_manifest(DRA_NODE, NODE)


def published() -> Json:
    return {
        **node_resource_slice(NODE, "uid-1", DRA_NODE.gpu_model(), DRA_NODE.gpus),
        "kind": "ResourceSlice",
    }


def allocated(name: str, *devices: str) -> Json:
    """A claim of `len(devices)` GPUs allocated on the step's node."""
    claim = resource_claim(name, "demo", gpu_request(len(devices)))
    claim["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "gpu", "driver": DRIVER, "pool": NODE, "device": d} for d in devices
                ]
            }
        }
    }
    return claim


def objects(*claims: Json) -> list[Json]:
    return [{**gpu_device_class(), "kind": "DeviceClass"}, published(), *claims]


def test_first_fit_splits_four_gpus_over_both_domains_where_the_domain_map_does_not() -> None:
    """gpu-0..2 taken: upstream's order takes gpu-3..6 (domains 0 and 1); the same allocator
    given the node's domain map takes gpu-4..7, as gpu-scheduler does."""
    cluster = objects(allocated("holder", "gpu-0"), allocated("pair", "gpu-1", "gpu-2"))
    wanted = resource_claim(f"{QUAD}-{POD_CLAIM}", "demo", gpu_request(4))
    fit = first_fit(cluster, node(), wanted)
    assert fit == ("gpu-3", "gpu-4", "gpu-5", "gpu-6")
    domains = node_domains(cluster, node())
    assert domains == {f"gpu-{i}": i // 4 for i in range(8)}
    assert domain_cell(fit, domains) == "spans 0,1"
    full = dra_store(cluster)
    labels = node()["metadata"]["labels"]
    mapped = {(DRIVER, NODE, device): domain for device, domain in domains.items()}
    outcome = Allocator(full.classes, full.in_use(), CelSelectors()).allocate(
        NODE,
        labels,
        full.pools_for(NODE, labels),
        [parse_resource_claim(wanted)],
        mapped,
        full.slices_for(NODE, labels),
    )
    assert outcome.allocations is not None
    chosen = tuple(r.device for r in outcome.allocations[0].results)
    assert chosen == ("gpu-4", "gpu-5", "gpu-6", "gpu-7")
    assert domain_cell(chosen, domains) == "1"


def test_first_fit_of_two_gpus_beside_gpu_0_stays_in_domain_0() -> None:
    cluster = objects(allocated("holder", "gpu-0"))
    fit = first_fit(cluster, node(), resource_claim("p", "demo", gpu_request(2)))
    assert fit == ("gpu-1", "gpu-2")


def test_the_holder_selects_gpu_0_by_its_uuid_and_does_not_fit_once_it_is_taken() -> None:
    uuid = device_uuid(published(), "gpu-0")
    assert uuid == gpu_uuid(NODE, 0) and uuid.startswith("GPU-")
    assert device_uuid(published(), "gpu-99") == ""
    claim = resource_claim(HOLDER, "demo", gpu_request(1, uuid_selector(uuid)))
    assert first_fit(objects(), node(), claim) == ("gpu-0",)
    assert first_fit(objects(allocated("other", "gpu-0")), node(), claim) is None


def test_the_step_pods_use_their_claims_on_the_step_node_only() -> None:
    pods = step_pods("demo", "SELECTOR")
    assert [name for name, _, _ in pods] == [HOLDER, PAIR, QUAD]
    (_, holder, source), *templated = pods
    assert source == {"resourceClaimName": HOLDER}
    (request,) = holder["spec"]["devices"]["requests"]
    assert request["exactly"]["selectors"] == [{"cel": {"expression": "SELECTOR"}}]
    assert request["exactly"]["count"] == 1
    counts = [c["spec"]["devices"]["requests"][0]["exactly"]["count"] for _, c, _ in templated]
    assert counts == [2, 4]
    assert [s for _, _, s in templated] == [
        {"resourceClaimTemplateName": template_name(2)},
        {"resourceClaimTemplateName": template_name(4)},
    ]
    pod = claim_pod(PAIR, "demo", templated[0][2])
    spec = pod["spec"]
    assert spec["schedulerName"] == "gpu-scheduler"
    assert spec["nodeSelector"] == {STEP_LABEL: "dra"} == dict(DRA_NODE.labels)
    assert spec["tolerations"][0]["key"] == DRA_NODE.taints[0]["key"] == STEP_LABEL
    assert spec["resourceClaims"] == [{"name": POD_CLAIM, **templated[0][2]}]
    assert spec["containers"][0]["resources"]["claims"] == [{"name": POD_CLAIM}]
    assert DRA_NODE.is_dra and DRA_NODE.gpus == 8


def test_domain_cells() -> None:
    domains = {"gpu-0": 0, "gpu-4": 1}
    assert domain_cell(("gpu-0",), domains) == "0"
    assert domain_cell(("gpu-0", "gpu-4"), domains) == "spans 0,1"
    assert domain_cell(("gpu-0", "gpu-9"), domains) == "?"
    assert domain_cell((), domains) == "-"


def test_the_table_is_headed_aligned_and_says_when_first_fit_finds_nothing() -> None:
    domains = {f"gpu-{i}": i // 4 for i in range(8)}
    rows = [
        ClaimRow("dra-quad", NODE, "c-1", ("gpu-4", "gpu-5"), ("gpu-3", "gpu-4")),
        ClaimRow("x", NODE, "c-2", ("gpu-0",), None),
    ]
    lines = claim_table(rows, domains).splitlines()
    assert lines[0].split() == ["POD", "NODE", "CLAIM", "DEVICES", "DOMAIN", "FIRST", "FIT",
                                "FIRST", "FIT", "DOMAIN"]  # fmt: skip
    assert len(TABLE_HEADER) == 7
    assert lines[1].split() == ["dra-quad", NODE, "c-1", "gpu-4,gpu-5", "1", "gpu-3,gpu-4",
                                "spans", "0,1"]  # fmt: skip
    assert "does not fit" in lines[2]
    starts = {line.index(NODE) for line in lines[1:]}
    assert len(starts) == 1 and lines[0].index("NODE") in starts


def test_the_summary_names_what_was_written_in_order() -> None:
    claim = allocated("dra-quad-gpus-abcde", "gpu-4", "gpu-5")
    claim["metadata"]["finalizers"] = ["resource.kubernetes.io/delete-protection"]
    claim["status"]["allocation"]["nodeSelector"] = {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}]}
        ]
    }
    claim["status"]["reservedFor"] = [{"resource": "pods", "name": "dra-quad", "uid": "u"}]
    assert claim_summary(claim) == (
        "claim dra-quad-gpus-abcde: metadata.finalizers resource.kubernetes.io/delete-protection, "
        f"then status.allocation gpu-4,gpu-5 (pool {NODE} of driver {DRIVER}; nodeSelector "
        f"metadata.name In {NODE}) with status.reservedFor pods/dra-quad"
    )
    bare = resource_claim("c", "demo", gpu_request(1))
    assert claim_summary(bare) == (
        "claim c: metadata.finalizers -, then status.allocation - (-; nodeSelector -) with "
        "status.reservedFor -"
    )
