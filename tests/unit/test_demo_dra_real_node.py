"""The demo's DRA step on the real node, its pure half (`hack.demo_dra`): the real node's devices
as Kubernetes' DRA test driver publishes them (4 devices `device-00`..`device-03` of driver
`gpu.nvidia.com`, no attributes), gpu-scheduler's domain map for them (its default layout, two
pairs), what gpu-scheduler and kube-scheduler's first fit pick for the step's claims, and the
probe pods."""

from __future__ import annotations

from typing import Any

from hack.demo_dra import (
    HOLDER,
    PAIR_GPUS,
    POD_CLAIM,
    REAL_PAIR,
    REQUEST,
    ClaimRow,
    claim_table,
    claim_variables,
    domain_cell,
    domains_text,
    expected_variable,
    first_fit,
    node_domains,
    nvlink_fit,
    probe_pod,
    real_node_pods,
    template_name,
)
from hack.localcluster.dradriver import DEVICE_CLASS, DRIVER_NAME, device_class_manifest
from hack.localcluster.realnode import PROBE_IMAGE, REAL_NODE_LABEL

NODE = "real-node"
Json = dict[str, Any]


def node() -> Json:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": NODE, "labels": {REAL_NODE_LABEL: "true"}},
    }


def published(count: int = 4) -> Json:
    """The test driver's slice: pool and node named after the node, devices without attributes
    (its `app/server.go`)."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{NODE}-{DRIVER_NAME}-x1", "uid": "uid-s"},
        "spec": {
            "driver": DRIVER_NAME,
            "nodeName": NODE,
            "pool": {"name": NODE, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": f"device-{i:02d}"} for i in range(count)],
        },
    }


def allocated(claim: Json, *devices: str) -> Json:
    results = [
        {"request": REQUEST, "driver": DRIVER_NAME, "pool": NODE, "device": d} for d in devices
    ]
    return {**claim, "status": {"allocation": {"devices": {"results": results}}}}


def objects(*claims: Json) -> list[Json]:
    return [{**device_class_manifest(), "kind": "DeviceClass"}, published(), *claims]


def test_the_real_nodes_devices_get_two_domains_of_two() -> None:
    domains = node_domains(objects(), node())
    assert domains == {"device-00": 0, "device-01": 0, "device-02": 1, "device-03": 1}
    assert domains_text(domains) == "device-00,device-01 | device-02,device-03"
    assert domains_text({}) == "-"


def test_beside_the_holder_first_fit_straddles_both_domains_and_gpu_scheduler_does_not() -> None:
    (holder_name, holder, _), (pair_name, pair, _) = real_node_pods("demo")
    assert (holder_name, pair_name) == (HOLDER, REAL_PAIR)
    # Nothing taken: both orders give the holder the first device.
    assert nvlink_fit(objects(), node(), holder) == ("device-00",)
    assert first_fit(objects(), node(), holder) == ("device-00",)
    cluster = objects(allocated(holder, "device-00"))
    fit = first_fit(cluster, node(), pair)
    chosen = nvlink_fit(cluster, node(), pair)
    assert fit == ("device-01", "device-02")
    assert chosen == ("device-02", "device-03")
    domains = node_domains(cluster, node())
    assert domain_cell(fit, domains) == "spans 0,1"
    assert domain_cell(chosen, domains) == "1"
    row = ClaimRow(pair_name, NODE, "dra-pair-gpus-x", chosen, fit)
    table = claim_table([row], domains).splitlines()
    assert table[1].split() == [
        pair_name, NODE, "dra-pair-gpus-x", "device-02,device-03", "1",
        "device-01,device-02", "spans", "0,1",
    ]  # fmt: skip


def test_the_pair_does_not_fit_with_three_devices_taken() -> None:
    (_, holder, _), (_, pair, _) = real_node_pods("demo")
    taken = allocated({**holder, "metadata": {"name": "other", "namespace": "demo"}}, "device-01")
    cluster = objects(allocated(holder, "device-00", "device-02"), taken)
    assert first_fit(cluster, node(), pair) is None
    assert nvlink_fit(cluster, node(), pair) is None


def test_the_probe_pods_ask_the_real_nodes_class_and_print_their_environment() -> None:
    (_, holder, holder_source), (_, pair, pair_source) = real_node_pods("demo")
    for claim, count in ((holder, 1), (pair, PAIR_GPUS)):
        (request,) = claim["spec"]["devices"]["requests"]
        assert request["name"] == REQUEST
        assert request["exactly"]["deviceClassName"] == DEVICE_CLASS
        assert request["exactly"]["count"] == count
    assert holder_source == {"resourceClaimName": HOLDER}
    assert pair_source == {"resourceClaimTemplateName": template_name(PAIR_GPUS)}
    spec = probe_pod(REAL_PAIR, "demo", pair_source)["spec"]
    assert spec["schedulerName"] == "gpu-scheduler"
    assert spec["nodeSelector"] == {REAL_NODE_LABEL: "true"}
    assert spec["resourceClaims"] == [{"name": POD_CLAIM, **pair_source}]
    (container,) = spec["containers"]
    assert (container["image"], container["args"]) == (PROBE_IMAGE, ["-env"])
    assert container["resources"]["claims"] == [{"name": POD_CLAIM}]


def test_claim_variables_are_the_drivers_lines_of_the_printed_environment() -> None:
    log = "PATH=/bin\nclaim_dra_pair_gpus_ab1_gpu=true\nHOME=/\nclaim_a_gpu=true\n"
    assert claim_variables(log) == ("claim_a_gpu=true", "claim_dra_pair_gpus_ab1_gpu=true")
    assert claim_variables("PATH=/bin\n") == ()
    assert expected_variable("dra-pair-gpus-ab1") == "claim_dra_pair_gpus_ab1_gpu=true"
