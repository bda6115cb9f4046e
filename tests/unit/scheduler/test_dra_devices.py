"""ResourceSlices, DeviceClasses and DeviceTaintRules (resource.k8s.io/v1) parsed into records:
NVIDIA-like slices as the API serves them, every bad field reported under its path, node
selection matching, and taint rules applied to slices."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from scheduler.model.device_classes import (
    parse_device_class,
    parse_device_taint_rule,
    with_taint_rules,
)
from scheduler.model.device_taints import DeviceTaint, DeviceToleration, tolerates
from scheduler.model.devices import ResourceSlice, parse_resource_slice
from scheduler.model.dra_fields import ECHO_LIMIT
from scheduler.model.fields import FieldError, sorted_errors
from scheduler.model.node_selection import parse_node_selector
from scheduler.model.semver import Version, parse_version
from tests.dra_objects import (
    DELETE,
    DRIVER,
    GPU_CLASS_SELECTOR,
    H100,
    changed,
    device_class,
    gpu_device,
    node_selector,
    opaque,
    requirement,
    resource_slice,
    taint,
    taint_rule,
)
from tests.fuzzing import MAX_MESSAGE
from topology.text import clip

GiB = 2**30


def only_error(errors: tuple[FieldError, ...], field: str, fragment: str) -> None:
    """`errors` hold one naming `field` whose message has `fragment`; all are bounded."""
    assert any(e.field == field and fragment in e.message for e in errors), errors
    assert all(len(str(e)) <= MAX_MESSAGE for e in errors)
    assert len(sorted_errors(errors)) <= 1024


# -- a valid slice ---------------------------------------------------------------------------


def test_an_nvidia_slice_parses_with_typed_qualified_attributes() -> None:
    parsed = parse_resource_slice(resource_slice("node-a-gpu.nvidia.com-x8z2p"))
    assert parsed.errors == ()
    assert (parsed.driver, parsed.pool.name, parsed.pool.generation) == (DRIVER, "node-a", 1)
    assert parsed.pool.resource_slice_count == 1
    assert parsed.node_selection.node_name == "node-a"
    assert [device.name for device in parsed.devices] == [f"gpu-{i}" for i in range(8)]
    gpu = parsed.devices[3]
    assert gpu.attributes[f"{DRIVER}/type"] == "gpu"
    assert gpu.attributes[f"{DRIVER}/productName"] == "NVIDIA H200"
    assert gpu.attributes[f"{DRIVER}/architecture"] == "Hopper"
    assert gpu.attributes["resource.kubernetes.io/pciBusID"] == "0000:5d:00.0"
    assert gpu.attributes["resource.kubernetes.io/pcieRoot"] == "pci0000:01"
    assert gpu.attributes[f"{DRIVER}/driverVersion"] == parse_version("580.159.4")
    capability = gpu.attributes[f"{DRIVER}/cudaComputeCapability"]
    assert isinstance(capability, Version) and (capability.major, capability.minor) == (9, 0)
    memory = gpu.capacity[f"{DRIVER}/memory"]
    assert (memory.value, memory.name) == (Decimal(143771 * 2**20), "memory")
    assert memory.value > 140 * GiB
    assert not gpu.allow_multiple_allocations and gpu.taints == ()


@pytest.mark.parametrize(
    ("attribute", "expected"),
    [
        ({"bool": True}, True),
        ({"int": 1}, 1),
        ({"int": -(2**63)}, -(2**63)),
        ({"string": ""}, ""),
        ({"version": "1.2.3-rc.1+build.7"}, parse_version("1.2.3-rc.1+build.7")),
    ],
)
def test_each_attribute_type(attribute: dict[str, Any], expected: object) -> None:
    device = gpu_device(0, attributes={"extra": attribute})
    parsed = parse_resource_slice(resource_slice("s", devices=[device]))
    assert parsed.errors == ()
    value = parsed.devices[0].attributes[f"{DRIVER}/extra"]
    assert value == expected and type(value) is type(expected)


def test_the_qualified_spelling_of_an_attribute_wins_whatever_the_order() -> None:
    for attributes in (
        {"type": {"string": "short"}, f"{DRIVER}/type": {"string": "long"}},
        {f"{DRIVER}/type": {"string": "long"}, "type": {"string": "short"}},
    ):
        device = {"name": "gpu-0", "attributes": attributes}
        parsed = parse_resource_slice(resource_slice("s", devices=[device]))
        assert parsed.devices[0].attributes == {f"{DRIVER}/type": "long"}


def test_versions_order_by_semver_precedence() -> None:
    texts = ["1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta.2", "1.0.0-beta.11"]
    texts += ["1.0.0-rc.1", "1.0.0", "1.0.1", "1.10.0", "580.159.4"]
    versions = [parse_version(text) for text in texts]
    assert all(v is not None for v in versions)
    shuffled = sorted(versions, key=lambda v: v.text)  # type: ignore[union-attr]
    ordered = sorted(shuffled, key=lambda v: v.precedence)  # type: ignore[union-attr]
    assert [v.text for v in ordered] == texts  # type: ignore[union-attr]
    assert parse_version("1.0.0+a").precedence == parse_version("1.0.0+b").precedence  # type: ignore[union-attr]
    for bad in ("580.159.04", "1.2", "v1.2.3", "1.2.3-", "1.2.3\n", "1.2.3-01", "1" * 70 + ".0.0"):
        assert parse_version(bad) is None, bad


def test_a_shared_device_with_a_request_policy() -> None:
    device = gpu_device(
        0,
        allowMultipleAllocations=True,
        capacity={
            "memory": {
                "value": "143771Mi",
                "requestPolicy": {"default": "16Gi", "validRange": {"min": "1Gi", "step": "1Gi"}},
            },
            "multiprocessors": {
                "value": "132",
                "requestPolicy": {"default": "66", "validValues": ["33", "66", "132"]},
            },
        },
    )
    parsed = parse_resource_slice(resource_slice("s", devices=[device]))
    assert parsed.errors == ()
    gpu = parsed.devices[0]
    assert gpu.allow_multiple_allocations
    memory = gpu.capacity[f"{DRIVER}/memory"].request_policy
    assert memory is not None and memory.default == 16 * GiB
    assert memory.valid_range is not None and memory.valid_range.step == GiB
    assert memory.valid_range.maximum is None
    sms = gpu.capacity[f"{DRIVER}/multiprocessors"].request_policy
    assert sms is not None and sms.valid_values == (33, 66, 132)


def test_partitionable_devices_with_shared_counters() -> None:
    counters = resource_slice(
        "counters",
        devices=[],
        sharedCounters=[
            {
                "name": "gpu-0-counter-set",
                "counters": {"memory": {"value": "143771Mi"}, "multiprocessors": {"value": "132"}},
            }
        ],
    )
    mig = gpu_device(
        0,
        name="gpu-0-mig-1g18gb-19-0",
        consumesCounters=[
            {
                "counterSet": "gpu-0-counter-set",
                "counters": {"memory": {"value": "18Gi"}, "multiprocessors": {"value": "16"}},
            }
        ],
    )
    parsed_counters = parse_resource_slice(counters)
    parsed_mig = parse_resource_slice(resource_slice("mig", devices=[mig]))
    assert parsed_counters.errors == () and parsed_mig.errors == ()
    [counter_set] = parsed_counters.shared_counters
    assert counter_set.counters == {"memory": Decimal(143771 * 2**20), "multiprocessors": 132}
    [consumed] = parsed_mig.devices[0].consumes_counters
    assert (consumed.name, consumed.counters["memory"]) == ("gpu-0-counter-set", 18 * GiB)


def test_taints_of_a_device() -> None:
    added = "2026-11-27T12:29:14Z"
    device = gpu_device(1, taints=[taint("gpu.nvidia.com/xid", "NoExecute", "79", timeAdded=added)])
    parsed = parse_resource_slice(resource_slice("s", devices=[device]))
    [found] = parsed.devices[0].taints
    assert (found.key, found.value, found.effect) == ("gpu.nvidia.com/xid", "79", "NoExecute")
    assert found.time_added is not None and found.time_added.year == 2026
    assert found.blocks_allocation
    newer = parse_resource_slice(
        resource_slice("s", devices=[gpu_device(1, taints=[taint("k", "SomeFutureEffect")])])
    )
    assert newer.errors == () and not newer.devices[0].taints[0].blocks_allocation


@pytest.mark.parametrize(
    ("toleration", "tolerated"),
    [
        (DeviceToleration("k", "Equal", "v", ""), True),
        (DeviceToleration("k", "Equal", "w", ""), False),
        (DeviceToleration("k", "Exists", "", "NoSchedule"), True),
        (DeviceToleration("k", "Exists", "", "NoExecute"), False),
        (DeviceToleration("", "Exists", "", ""), True),
        (DeviceToleration("other", "Exists", "", ""), False),
    ],
)
def test_tolerations_follow_upstream(toleration: DeviceToleration, tolerated: bool) -> None:
    assert tolerates(toleration, DeviceTaint("k", "v", "NoSchedule")) is tolerated


def test_node_selection_kinds() -> None:
    selected = parse_resource_slice(
        resource_slice(
            "s",
            node=None,
            pool="rack-1",
            nodeSelector=node_selector(requirement("rack", "In", "1")),
        )
    )
    assert selected.errors == ()
    assert selected.node_selection.node_selector is not None
    assert selected.node_selection.matches("any", {"rack": "1"})
    everywhere = parse_resource_slice(resource_slice("s", node=None, pool="p", allNodes=True))
    assert everywhere.errors == () and everywhere.node_selection.all_nodes
    per_device = parse_resource_slice(
        resource_slice(
            "s",
            node=None,
            pool="p",
            perDeviceNodeSelection=True,
            devices=[gpu_device(0, nodeName="node-a"), gpu_device(1, allNodes=True)],
        )
    )
    assert per_device.errors == () and per_device.per_device_node_selection
    first, second = (device.node_selection for device in per_device.devices)
    assert first is not None and first.node_name == "node-a"
    assert second is not None and second.all_nodes


# -- every bad field is reported under its path ----------------------------------------------

SLICE = resource_slice("s", devices=[gpu_device(0), gpu_device(1)])
DEVICE0 = ("spec", "devices", 0)
ATTRS = (*DEVICE0, "attributes")

BAD_SLICES: list[tuple[str, tuple[Any, ...], Any, str, str]] = [
    ("no name", ("metadata", "name"), DELETE, "metadata.name", "is required"),
    ("spec not an object", ("spec",), [], "spec", "must be an object"),
    ("no driver", ("spec", "driver"), DELETE, "spec.driver", "is required"),
    ("bad driver", ("spec", "driver"), "gpu_nvidia.com", "spec.driver", "DNS subdomain"),
    ("long driver", ("spec", "driver"), "a" * 64 + ".com", "spec.driver", "at most 63"),
    ("no pool name", ("spec", "pool", "name"), DELETE, "spec.pool.name", "is required"),
    ("bad pool name", ("spec", "pool", "name"), "Node A", "spec.pool.name", "DNS subdomains"),
    ("long pool name", ("spec", "pool", "name"), "a." * 127, "spec.pool.name", "at most 253"),
    ("negative generation", ("spec", "pool", "generation"), -1, "spec.pool.generation", "0 to"),
    ("text generation", ("spec", "pool", "generation"), "1", "spec.pool.generation", "integer"),
    (
        "zero slices",
        ("spec", "pool", "resourceSliceCount"),
        0,
        "spec.pool.resourceSliceCount",
        "1 to",
    ),
    (
        "no slice count",
        ("spec", "pool", "resourceSliceCount"),
        DELETE,
        "spec.pool.resourceSliceCount",
        "required",
    ),
    ("no node selection", ("spec", "nodeName"), DELETE, "spec", "exactly one of nodeName"),
    ("two node selections", ("spec", "allNodes"), True, "spec", "got nodeName, allNodes"),
    ("empty node name", ("spec", "nodeName"), "", "spec.nodeName", "not empty"),
    ("allNodes false", ("spec", "allNodes"), False, "spec.allNodes", "unset or true"),
    ("node name not text", ("spec", "nodeName"), 7, "spec.nodeName", "must be a string"),
    ("node name not a name", ("spec", "nodeName"), "Node A", "spec.nodeName", "DNS subdomain"),
    ("devices not a list", ("spec", "devices"), {}, "spec.devices", "must be a list"),
    (
        "too many devices",
        ("spec", "devices"),
        [gpu_device(i) for i in range(129)],
        "spec.devices",
        "at most 128",
    ),
    ("device without name", (*DEVICE0, "name"), DELETE, "spec.devices[0].name", "is required"),
    ("device name not a label", (*DEVICE0, "name"), "GPU_0", "spec.devices[0].name", "DNS label"),
    (
        "duplicate device",
        ("spec", "devices", 1, "name"),
        "gpu-0",
        "spec.devices[1].name",
        "duplicate",
    ),
    (
        "attribute with two values",
        (*ATTRS, "type"),
        {"string": "gpu", "int": 1},
        "spec.devices[0].attributes[type]",
        "exactly one value",
    ),
    ("attribute without value", (*ATTRS, "type"), {}, "spec.devices[0].attributes[type]", "got 0"),
    (
        "attribute not an object",
        (*ATTRS, "type"),
        "gpu",
        "spec.devices[0].attributes[type]",
        "must be an object",
    ),
    (
        "int out of range",
        (*ATTRS, "n"),
        {"int": 2**63},
        "spec.devices[0].attributes[n].int",
        "int64",
    ),
    (
        "bool as text",
        (*ATTRS, "n"),
        {"bool": "true"},
        "spec.devices[0].attributes[n].bool",
        "boolean",
    ),
    (
        "long string",
        (*ATTRS, "uuid"),
        {"string": "x" * 65},
        "spec.devices[0].attributes[uuid].string",
        "at most 64",
    ),
    (
        "raw driver version",
        (*ATTRS, "driverVersion"),
        {"version": "580.159.04"},
        "spec.devices[0].attributes[driverVersion].version",
        "semver",
    ),
    (
        "list attribute",
        (*ATTRS, "numa"),
        {"ints": [0, 1]},
        "spec.devices[0].attributes[numa].ints",
        "DRAListTypeAttributes",
    ),
    (
        "name not an identifier",
        (*ATTRS, "3d"),
        {"bool": True},
        "spec.devices[0].attributes[3d]",
        "C identifier",
    ),
    (
        "name with two slashes",
        (*ATTRS, "a.com/b/c"),
        {"bool": True},
        "spec.devices[0].attributes[a.com/b/c]",
        "at most one '/'",
    ),
    (
        "long domain",
        (*ATTRS, "a" * 64 + "/x"),
        {"bool": True},
        f"spec.devices[0].attributes[{clip('a' * 64 + '/x', ECHO_LIMIT)}]",
        "domain",
    ),
    (
        "long identifier",
        (*ATTRS, "x" * 33),
        {"bool": True},
        f"spec.devices[0].attributes[{'x' * 33}]",
        "at most 32",
    ),
    (
        "too many attributes",
        ATTRS,
        {f"a{i}": {"int": i} for i in range(33)},
        "spec.devices[0].attributes",
        "at most 32",
    ),
    (
        "capacity without value",
        (*DEVICE0, "capacity", "memory"),
        {},
        "spec.devices[0].capacity[memory].value",
        "is required",
    ),
    (
        "capacity not a quantity",
        (*DEVICE0, "capacity", "memory", "value"),
        "lots",
        "spec.devices[0].capacity[memory].value",
        "invalid quantity",
    ),
    (
        "policy of an exclusive device",
        (*DEVICE0, "capacity", "memory", "requestPolicy"),
        {"default": "1Gi"},
        "spec.devices[0].capacity[memory].requestPolicy",
        "allowMultipleAllocations",
    ),
    (
        "unsorted valid values",
        (*DEVICE0, "capacity", "memory", "requestPolicy"),
        {"default": "2", "validValues": ["2", "1"]},
        "spec.devices[0].capacity[memory].requestPolicy.validValues",
        "ascending",
    ),
    (
        "range without default",
        (*DEVICE0, "capacity", "memory", "requestPolicy"),
        {"validRange": {"min": "1"}},
        "spec.devices[0].capacity[memory].requestPolicy.default",
        "is required",
    ),
    (
        "range without min",
        (*DEVICE0, "capacity", "memory", "requestPolicy"),
        {"default": "1", "validRange": {}},
        "spec.devices[0].capacity[memory].requestPolicy.validRange.min",
        "is required",
    ),
    (
        "taint without key",
        (*DEVICE0, "taints"),
        [{"effect": "NoSchedule"}],
        "spec.devices[0].taints[0].key",
        "is required",
    ),
    (
        "taint without effect",
        (*DEVICE0, "taints"),
        [{"key": "k"}],
        "spec.devices[0].taints[0].effect",
        "is required",
    ),
    (
        "taint key not a label",
        (*DEVICE0, "taints"),
        [taint("a b")],
        "spec.devices[0].taints[0].key",
        "label name",
    ),
    (
        "taint time not a time",
        (*DEVICE0, "taints"),
        [taint("k", timeAdded="yesterday")],
        "spec.devices[0].taints[0].timeAdded",
        "timestamp",
    ),
    (
        "too many taints",
        (*DEVICE0, "taints"),
        [taint(f"k{i}") for i in range(17)],
        "spec.devices[0].taints",
        "at most 16",
    ),
    (
        "consumption without set",
        (*DEVICE0, "consumesCounters"),
        [{"counters": {"c": {"value": "1"}}}],
        "spec.devices[0].consumesCounters[0].counterSet",
        "is required",
    ),
    (
        "consumption without counters",
        (*DEVICE0, "consumesCounters"),
        [{"counterSet": "s"}],
        "spec.devices[0].consumesCounters[0].counters",
        "is required",
    ),
    (
        "counter not a label",
        (*DEVICE0, "consumesCounters"),
        [{"counterSet": "s", "counters": {"C": {"value": "1"}}}],
        "spec.devices[0].consumesCounters[0].counters[C]",
        "DNS label",
    ),
    (
        "three consumptions",
        (*DEVICE0, "consumesCounters"),
        [{"counterSet": f"s{i}", "counters": {"c": {"value": "1"}}} for i in range(3)],
        "spec.devices[0].consumesCounters",
        "at most 2",
    ),
    (
        "devices and counters",
        ("spec", "sharedCounters"),
        [{"name": "s", "counters": {"c": {"value": "1"}}}],
        "spec",
        "only one of sharedCounters and devices",
    ),
    (
        "duplicate counter set",
        ("spec", "sharedCounters"),
        [{"name": "s", "counters": {"c": {"value": "1"}}}] * 2,
        "spec.sharedCounters[1].name",
        "duplicate",
    ),
    (
        "device node without per-device selection",
        (*DEVICE0, "nodeName"),
        "node-a",
        "spec.devices[0]",
        "need perDeviceNodeSelection",
    ),
    (
        "binding conditions",
        (*DEVICE0, "bindingConditions"),
        ["a", "b", "c", "d", "e"],
        "spec.devices[0].bindingConditions",
        "at most 4",
    ),
]


@pytest.mark.parametrize(
    ("path", "value", "field", "fragment"),
    [case[1:] for case in BAD_SLICES],
    ids=[case[0] for case in BAD_SLICES],
)
def test_a_bad_slice_field_is_reported_under_its_path(
    path: tuple[Any, ...], value: Any, field: str, fragment: str
) -> None:
    parsed = parse_resource_slice(changed(SLICE, path, value))
    only_error(parsed.errors, field, fragment)


def test_sixty_five_devices_are_too_many_when_one_has_taints() -> None:
    devices = [gpu_device(i) for i in range(65)]
    devices[7]["taints"] = [taint("k")]
    parsed = parse_resource_slice(resource_slice("s", devices=devices))
    only_error(parsed.errors, "spec.devices", "at most 64")
    assert len(parse_resource_slice(resource_slice("s", devices=devices[:64])).errors) == 0


def test_a_slice_node_selector_has_exactly_one_term() -> None:
    two = {
        "nodeSelectorTerms": [
            {"matchExpressions": [requirement("rack", "In", "1")]},
            {"matchExpressions": [requirement("rack", "In", "2")]},
        ]
    }
    body = resource_slice("s", node=None, pool="p", nodeSelector=two)
    errors = parse_resource_slice(body).errors
    only_error(errors, "spec.nodeSelector.nodeSelectorTerms", "exactly one term")


def test_per_device_selection_needs_one_selection_on_each_device() -> None:
    body = resource_slice(
        "s", node=None, pool="p", perDeviceNodeSelection=True, devices=[gpu_device(0)]
    )
    only_error(parse_resource_slice(body).errors, "spec.devices[0]", "exactly one of nodeName")


def test_bad_node_selectors_are_reported_and_select_nothing() -> None:
    cases = [
        (requirement("rack", "Near", "1"), "matchExpressions[0].operator", "unknown operator"),
        (requirement("rack", "In"), "matchExpressions[0].values", "at least one value"),
        (requirement("rack", "Exists", "1"), "matchExpressions[0].values", "takes no values"),
        (requirement("rank", "Gt", "one"), "matchExpressions[0].values", "one integer"),
    ]
    for expression, field, fragment in cases:
        errors: list[FieldError] = []
        selector = parse_node_selector(node_selector(expression), "sel", errors)
        only_error(tuple(errors), f"sel.nodeSelectorTerms[0].{field}", fragment)
        assert selector is not None and not selector.matches("n", {"rack": "1", "rank": "2"})
    for fields, field, fragment in [
        ([requirement("metadata.name", "Exists")], "matchFields[0].operator", "In or NotIn"),
        ([requirement("metadata.name", "In", "a", "b")], "matchFields[0].values", "exactly one"),
    ]:
        errors = []
        parse_node_selector(node_selector(fields=fields), "sel", errors)
        only_error(tuple(errors), f"sel.nodeSelectorTerms[0].{field}", fragment)


@pytest.mark.parametrize(
    ("selector", "name", "labels", "matches"),
    [
        (node_selector(requirement("rack", "In", "1", "2")), "n", {"rack": "2"}, True),
        (node_selector(requirement("rack", "In", "1")), "n", {}, False),
        (node_selector(requirement("rack", "NotIn", "1")), "n", {}, True),
        (node_selector(requirement("rack", "Exists")), "n", {"rack": ""}, True),
        (node_selector(requirement("rack", "DoesNotExist")), "n", {"rack": ""}, False),
        (node_selector(requirement("gpus", "Gt", "4")), "n", {"gpus": "8"}, True),
        (node_selector(requirement("gpus", "Lt", "4")), "n", {"gpus": "8"}, False),
        (node_selector(requirement("gpus", "Gt", "4")), "n", {"gpus": "eight"}, False),
        (node_selector(fields=[requirement("metadata.name", "In", "n")]), "n", {}, True),
        (node_selector(fields=[requirement("metadata.name", "In", "n")]), "m", {}, False),
        (node_selector(fields=[requirement("metadata.name", "NotIn", "n")]), "m", {}, True),
        (node_selector(fields=[requirement("metadata.uid", "In", "")]), "m", {}, True),
        (node_selector(fields=[requirement("metadata.name", "In", "n")]), "", {}, True),
        ({"nodeSelectorTerms": [{}]}, "n", {}, False),
        ({"nodeSelectorTerms": []}, "n", {}, False),
        (
            {
                "nodeSelectorTerms": [
                    {"matchExpressions": [requirement("rack", "In", "1")]},
                    {"matchExpressions": [requirement("rack", "In", "2")]},
                ]
            },
            "n",
            {"rack": "2"},
            True,
        ),
    ],
)
def test_node_selectors_match_as_upstream(
    selector: dict[str, Any], name: str, labels: dict[str, str], matches: bool
) -> None:
    errors: list[FieldError] = []
    parsed = parse_node_selector(selector, "sel", errors)
    assert errors == [] and parsed is not None
    assert parsed.matches(name, labels) is matches


def test_huge_values_give_bounded_errors() -> None:
    body = changed(SLICE, ("spec", "driver"), "x" * 100_000)
    body = changed(body, (*ATTRS, "y" * 100_000), {"string": "z" * 100_000})
    body["spec"]["devices"] += [{"name": "n" * 100_000}] * 50
    parsed = parse_resource_slice(body)
    assert 2 < len(parsed.errors) <= 32
    assert parsed.errors[-1].field == "(more)"
    assert all(len(str(error)) <= MAX_MESSAGE for error in parsed.errors)


def test_values_that_repr_spells_long_still_give_bounded_errors() -> None:
    odd = "\U00018d09" * 200  # repr() writes each as 10 characters
    devices = [gpu_device(i) for i in range(128)]
    devices[127]["attributes"][odd] = {"version": odd}
    devices[126]["taints"] = [{"key": odd, "effect": odd, "timeAdded": odd}]
    devices[125]["capacity"][odd[:30]] = {"value": odd}
    parsed = parse_resource_slice(resource_slice("s", devices=devices))
    assert len(parsed.errors) >= 4
    assert all(len(str(error)) <= 3 * MAX_MESSAGE // 4 for error in parsed.errors)


# -- DeviceClasses ---------------------------------------------------------------------------


def test_the_nvidia_device_class() -> None:
    parsed = parse_device_class(
        device_class(extended_resource_name="nvidia.com/gpu", config=[opaque()])
    )
    assert parsed.errors == ()
    assert (parsed.name, parsed.selectors) == (DRIVER, (GPU_CLASS_SELECTOR,))
    assert parsed.extended_resource_name == "nvidia.com/gpu"
    [config] = parsed.config
    assert config.driver == DRIVER and '"strategy":"TimeSlicing"' in config.parameters
    bare = parse_device_class({"metadata": {"name": "any"}, "spec": {}})
    assert bare.errors == () and bare.selectors == () and bare.extended_resource_name == ""


CLASS = device_class(config=[opaque()])
BAD_CLASSES: list[tuple[str, tuple[Any, ...], Any, str, str]] = [
    ("selector without cel", ("spec", "selectors", 0), {}, "spec.selectors[0].cel", "is required"),
    (
        "empty expression",
        ("spec", "selectors", 0, "cel", "expression"),
        "",
        "spec.selectors[0].cel.expression",
        "is required",
    ),
    (
        "long expression",
        ("spec", "selectors", 0, "cel", "expression"),
        "true && " * 1300,
        "spec.selectors[0].cel.expression",
        "at most 10240",
    ),
    (
        "too many selectors",
        ("spec", "selectors"),
        [{"cel": {"expression": "true"}}] * 33,
        "spec.selectors",
        "at most 32",
    ),
    (
        "resource without domain",
        ("spec", "extendedResourceName"),
        "gpu",
        "spec.extendedResourceName",
        "extended resource",
    ),
    (
        "kubernetes.io resource",
        ("spec", "extendedResourceName"),
        "kubernetes.io/gpu",
        "spec.extendedResourceName",
        "kubernetes.io",
    ),
    ("config without opaque", ("spec", "config", 0), {}, "spec.config[0].opaque", "is required"),
    (
        "opaque without driver",
        ("spec", "config", 0, "opaque", "driver"),
        DELETE,
        "spec.config[0].opaque.driver",
        "is required",
    ),
    (
        "opaque without parameters",
        ("spec", "config", 0, "opaque", "parameters"),
        DELETE,
        "spec.config[0].opaque.parameters",
        "is required",
    ),
    (
        "huge parameters",
        ("spec", "config", 0, "opaque", "parameters"),
        {"x": "y" * 10240},
        "spec.config[0].opaque.parameters",
        "at most 10240 bytes",
    ),
]


@pytest.mark.parametrize(
    ("path", "value", "field", "fragment"),
    [case[1:] for case in BAD_CLASSES],
    ids=[case[0] for case in BAD_CLASSES],
)
def test_a_bad_device_class_field_is_reported_under_its_path(
    path: tuple[Any, ...], value: Any, field: str, fragment: str
) -> None:
    only_error(parse_device_class(changed(CLASS, path, value)).errors, field, fragment)


# -- DeviceTaintRules ------------------------------------------------------------------------


def test_taint_rules_select_devices_by_driver_pool_and_device() -> None:
    xid = taint("gpu.nvidia.com/xid", "NoExecute", "79")
    one = parse_device_taint_rule(
        taint_rule("one", xid, driver=DRIVER, pool="node-a", device="gpu-2")
    )
    whole_pool = parse_device_taint_rule(taint_rule("pool", taint("maintenance"), pool="node-a"))
    everything = parse_device_taint_rule(taint_rule("all", taint("drain", "None")))
    nothing = parse_device_taint_rule(
        {"metadata": {"name": "none"}, "spec": {"taint": taint("never")}}
    )
    assert all(rule.errors == () for rule in (one, whole_pool, everything, nothing))
    assert nothing.selector is None
    parsed = parse_resource_slice(resource_slice("s"))
    tainted = with_taint_rules(parsed, [one, whole_pool, everything, nothing])
    keys = [[t.key for t in device.taints] for device in tainted.devices]
    assert keys[2] == ["gpu.nvidia.com/xid", "maintenance", "drain"]
    assert keys[0] == ["maintenance", "drain"]
    other_pool = parse_resource_slice(resource_slice("s", node="node-b"))
    assert [[t.key for t in d.taints] for d in with_taint_rules(other_pool, [one]).devices] == [
        []
    ] * 8
    untouched: ResourceSlice = with_taint_rules(parsed, [nothing])
    assert untouched is parsed


BAD_RULES: list[tuple[str, tuple[Any, ...], Any, str, str]] = [
    ("no taint", ("spec", "taint"), DELETE, "spec.taint", "is required"),
    (
        "taint without effect",
        ("spec", "taint", "effect"),
        DELETE,
        "spec.taint.effect",
        "is required",
    ),
    (
        "bad driver",
        ("spec", "deviceSelector", "driver"),
        "A B",
        "spec.deviceSelector.driver",
        "DNS subdomain",
    ),
    (
        "bad pool",
        ("spec", "deviceSelector", "pool"),
        "A B",
        "spec.deviceSelector.pool",
        "DNS subdomains",
    ),
    (
        "bad device",
        ("spec", "deviceSelector", "device"),
        "GPU 0",
        "spec.deviceSelector.device",
        "DNS label",
    ),
    (
        "selector not an object",
        ("spec", "deviceSelector"),
        "all",
        "spec.deviceSelector",
        "must be an object",
    ),
]


@pytest.mark.parametrize(
    ("path", "value", "field", "fragment"),
    [case[1:] for case in BAD_RULES],
    ids=[case[0] for case in BAD_RULES],
)
def test_a_bad_taint_rule_field_is_reported_under_its_path(
    path: tuple[Any, ...], value: Any, field: str, fragment: str
) -> None:
    rule = taint_rule("r", taint("k"), driver=DRIVER)
    parsed = parse_device_taint_rule(changed(rule, path, value))
    only_error(parsed.errors, field, fragment)


def test_an_h100_slice_too() -> None:
    parsed = parse_resource_slice(resource_slice("s", devices=[gpu_device(0, gpu=H100)]))
    memory = parsed.devices[0].capacity[f"{DRIVER}/memory"].value
    assert parsed.errors == () and memory == 81559 * 2**20
