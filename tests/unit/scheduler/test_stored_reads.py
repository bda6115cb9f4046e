"""The informer stores' trims drop only what the scheduler never reads (`scheduler.model.stored`).

Two checks over a corpus of pods shaped as the API server returns them (its defaults, a
service-account volume, kubelet status) using every field the parsers read, and over fuzzed
pods:

- `parse_pod`, `pod_ref` and `parse_node` give the same records for trimmed and whole objects;
- every lookup the handlers make (`PodHandler` and `NodeHandler` on add, update and delete, and
  the parsers under them) is recorded, key by key and with the value found, once on whole
  objects and once on trimmed ones: the two records are equal. A handler reading a dropped
  field would find a value in the whole object and none in the trimmed one.

The one difference allowed is documented in `scheduler.model.stored`: of the pod's conditions
only PodScheduled is kept, and the handlers read of the others their `type` only (to skip them).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import given

from hack.bench.control_plane_model import pod_manifest
from hack.bench.feature_workload import feature_kinds, with_features
from scheduler.core.handlers import NodeHandler, PodHandler
from scheduler.core.queue import SchedulingQueue
from scheduler.gangs.tracker import GangTracker
from scheduler.model.objects import PodInfo, parse_node, parse_pod, pod_ref
from scheduler.model.stored import trim_node, trim_pod
from scheduler.state.cache import ClusterCache
from tests.fuzzing import FUZZ, pods
from tests.unit.scheduler.builders import make_node, make_pod
from tests.unit.scheduler.context import make_context
from tests.unit.scheduler.test_trimmed_stores import rich_pod, same_node, same_pod

Json = dict[str, Any]
Reads = set[tuple[str, object]]

TIME = "2024-05-01T10:00:00Z"


def served(pod: Json) -> Json:
    """`pod` as the API server returns it once admitted and run: its defaults, the service
    account's projected volume and mount, image settings, managedFields, kubelet status."""
    pod = copy.deepcopy(pod)
    metadata, spec = pod["metadata"], pod["spec"]
    metadata.update(
        generation=1,
        generateName=f"{metadata['name']}-",
        ownerReferences=[{"apiVersion": "v1", "kind": "ReplicaSet", "name": "rs", "uid": "u"}],
        managedFields=[{"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:spec": {}}}],
    )
    volume = {
        "name": "kube-api-access-x",
        "projected": {
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt"}]}},
            ],
            "defaultMode": 420,
        },
    }
    spec["volumes"] = [volume, *spec.get("volumes", [])]
    spec.update(
        restartPolicy="Always",
        terminationGracePeriodSeconds=30,
        dnsPolicy="ClusterFirst",
        serviceAccountName="default",
        serviceAccount="default",
        securityContext={},
        enableServiceLinks=True,
    )
    spec.setdefault("tolerations", []).extend(
        {"key": f"node.kubernetes.io/{key}", "operator": "Exists", "effect": "NoExecute"}
        for key in ("not-ready", "unreachable")
    )
    for container in spec.get("containers", []) + spec.get("initContainers", []):
        if isinstance(container, dict):
            container.update(
                image="example.invalid/cuda:1",
                imagePullPolicy="IfNotPresent",
                terminationMessagePath="/dev/termination-log",
                terminationMessagePolicy="File",
                volumeMounts=[{"name": "kube-api-access-x", "mountPath": "/var/run/secrets"}],
                env=[{"name": "A", "value": "b"}],
                command=["python", "train.py"],
            )
    status = pod.setdefault("status", {})
    conditions = status.setdefault("conditions", [])
    conditions[:0] = [
        {"type": kind, "status": "True", "lastProbeTime": None, "lastTransitionTime": TIME}
        for kind in ("Initialized", "Ready", "ContainersReady")
    ]
    status.update(
        hostIP="10.0.0.1",
        podIP="10.0.0.2",
        podIPs=[{"ip": "10.0.0.2"}],
        qosClass="Burstable",
        containerStatuses=[{"name": "main", "ready": True, "restartCount": 0, "image": "x"}],
    )
    return pod


def claimed_pod() -> Json:
    """Volumes of every kind the scheduler reads (and one it does not), a DRA claim recorded in
    the status, a sidecar with a host port, pod-level resources and overhead."""
    pod = make_pod(
        "claimed",
        init_containers=[
            {
                "name": "proxy",
                "restartPolicy": "Always",
                "ports": [{"containerPort": 80, "hostPort": 8080}],
                "resources": {"requests": {"cpu": "50m"}},
            }
        ],
        overhead={"cpu": "10m"},
    )
    spec = pod["spec"]
    spec["containers"][0]["resources"]["claims"] = [{"name": "gpus"}]
    spec["resources"] = {"requests": {"cpu": "1"}}
    spec["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "one-gpu"}]
    spec["volumes"] = [
        {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
        {"name": "broken", "persistentVolumeClaim": {}},
        {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
        {"name": "disk", "gcePersistentDisk": {"pdName": "d"}},
        {"name": "cache", "emptyDir": {}},
    ]
    pod["status"] = {
        "phase": "Pending",
        "resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": "claimed-gpus-x"}],
    }
    pod["metadata"]["annotations"] = {"example.com/note": "kept"}
    return pod


def gated_pod() -> Json:
    pod = make_pod("gated")
    pod["spec"]["schedulingGates"] = [{"name": "example.com/quota"}]
    reason = {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}
    pod["status"] = {"phase": "Pending", "conditions": [reason]}
    return pod


def feature_pods() -> list[Json]:
    """One pod of each kind of the control-plane benchmark's feature mix."""
    found: dict[str, Json] = {}
    for index, (kind, gang) in enumerate(feature_kinds(60, 0)):
        manifest = pod_manifest(f"f-{index}", 2, "gpu-scheduler", {"type": "kwok"})
        manifest["metadata"].update(namespace="bench", uid=f"u-{index}", resourceVersion="1")
        found.setdefault(kind, with_features(manifest, index, kind, gang))
    return list(found.values())


def api_pods() -> list[Json]:
    """Pods shaped as the API server accepts them, plain and as it returns them."""
    bound = make_pod("bound", gpus=4, node="n1", phase="Running", gpu_indices="0,1,2,3")
    bound["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": TIME}
    ]
    kueue = make_pod("kueue")
    kueue["metadata"]["labels"] = {"kueue.x-k8s.io/pod-group-name": "trainers"}
    kueue["metadata"]["annotations"] = {"kueue.x-k8s.io/pod-group-total-count": "2"}
    plain = [rich_pod(), claimed_pod(), gated_pod(), bound, kueue, *feature_pods()]
    return [*(served(pod) for pod in plain), *plain]


def corpus() -> list[Json]:
    """`api_pods` and shapes the API server would refuse, for the parsers."""
    odd: list[Json] = [
        {"metadata": "not an object", "spec": [], "status": 3},
        {"metadata": {"name": "x"}, "spec": {"containers": ["no", 1], "volumes": {"a": 1}}},
        {"metadata": {"name": "y"}, "status": {"conditions": ["odd", {"type": "PodScheduled"}]}},
    ]
    return [*api_pods(), *odd]


@pytest.mark.parametrize("pod", corpus(), ids=lambda pod: str(pod.get("metadata")))
def test_parsers_see_the_same_pod_through_the_trim(pod: Json) -> None:
    trimmed = trim_pod(copy.deepcopy(pod))
    assert same_pod(parse_pod(pod), parse_pod(trimmed))
    assert pod_ref(pod) == pod_ref(trimmed)


def test_the_trim_cuts_what_the_api_server_adds() -> None:
    whole = served(claimed_pod())
    trimmed = trim_pod(copy.deepcopy(whole))
    assert set(trimmed["metadata"]) < set(whole["metadata"])
    assert trimmed["metadata"]["annotations"] == {"example.com/note": "kept"}
    assert [set(v) for v in trimmed["spec"]["volumes"]] == [
        {"name"},
        {"name", "persistentVolumeClaim"},
        {"name", "persistentVolumeClaim"},
        {"name", "ephemeral"},
        {"name", "gcePersistentDisk"},
        {"name"},
    ]
    assert set(trimmed["spec"]["containers"][0]) == {"name", "resources"}
    assert [c["type"] for c in trimmed["status"]["conditions"]] == []
    assert set(trimmed["status"]) == {"phase", "resourceClaimStatuses", "conditions"}
    parsed = parse_pod(trimmed)
    assert parsed.claims == ("data",) and parsed.unsupported == (
        "spec.volumes[*].ephemeral",
        "spec.volumes[*].gcePersistentDisk",
    )


@FUZZ
@given(pods())
def test_parsers_see_the_same_fuzzed_pod_through_the_trim(pod: Json) -> None:
    trimmed = trim_pod(copy.deepcopy(pod))
    assert same_pod(parse_pod(pod), parse_pod(trimmed))
    assert pod_ref(pod) == pod_ref(trimmed)


# -- recorded reads ---------------------------------------------------------------------------


def recorded(value: object, path: str, reads: Reads) -> object:
    """`value` wrapped so that every lookup below it is added to `reads` as (path, what was
    found: a scalar itself, else its type's name)."""
    if isinstance(value, dict):
        return RecordedDict(value, path, reads)
    if isinstance(value, list):
        return RecordedList(value, path, reads)
    return value


def _found(value: object) -> object:
    return type(value).__name__ if isinstance(value, dict | list) else value


class RecordedDict(dict[str, Any]):
    """A dict whose lookups are recorded (see `recorded`); equality compares the content."""

    def __init__(self, raw: Json, path: str, reads: Reads) -> None:
        super().__init__(raw)
        self.path, self.reads = path, reads

    def _read(self, key: str) -> object:
        where = f"{self.path}.{key}"
        value = dict.get(self, key)
        self.reads.add((where, _found(value) if dict.__contains__(self, key) else "<absent>"))
        return recorded(value, where, self.reads)

    def get(self, key: str, default: object = None) -> Any:
        value = self._read(key)
        return value if dict.__contains__(self, key) else default

    def __getitem__(self, key: str) -> Any:
        if not dict.__contains__(self, key):
            self.reads.add((f"{self.path}.{key}", "<absent>"))
            raise KeyError(key)
        return self._read(key)

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str):
            self._read(key)
        return dict.__contains__(self, key)

    def __iter__(self) -> Iterator[str]:
        for key in list(dict.keys(self)):
            self._read(key)
            yield key

    def keys(self) -> Any:
        return list(iter(self))

    def items(self) -> Any:
        return [(key, self._read(key)) for key in list(dict.keys(self))]

    def values(self) -> Any:
        return [self._read(key) for key in list(dict.keys(self))]


class RecordedList(list[Any]):
    """A list whose items, read by iteration or index, are recorded under `path[*]`."""

    def __init__(self, raw: list[Any], path: str, reads: Reads) -> None:
        super().__init__(raw)
        self.path, self.reads = f"{path}[*]", reads

    def __iter__(self) -> Iterator[Any]:
        for item in list.__iter__(self):
            self.reads.add((self.path, _found(item)))
            yield recorded(item, self.path, self.reads)

    def __getitem__(self, index: Any) -> Any:
        item = list.__getitem__(self, index)
        if isinstance(index, slice):
            return [recorded(i, self.path, self.reads) for i in item]
        self.reads.add((self.path, _found(item)))
        return recorded(item, self.path, self.reads)


def handler_reads(objects: list[Json], trim: Callable[[Json], Json] | None) -> Reads:
    """The lookups `PodHandler` makes over add, update (labels changed) and delete of each pod,
    and `NodeHandler` of a node, each object trimmed first when `trim` is given."""
    reads: Reads = set()
    cache = ClusterCache()
    cache.add_or_update_node(parse_node(make_node("n1", gpus=8)))
    queue: SchedulingQueue[PodInfo] = SchedulingQueue()
    handler = PodHandler(make_context(cache), queue, gangs=GangTracker(), gated=lambda pod: None)

    def wrap(obj: Json) -> Any:
        obj = copy.deepcopy(obj)
        return recorded(trim(obj) if trim else obj, "", reads)

    for pod in objects:
        changed = copy.deepcopy(pod)
        if isinstance(changed.get("metadata"), dict):
            changed["metadata"]["labels"] = {"changed": "yes"}
        handler.on_add(wrap(pod))
        handler.on_update(wrap(pod), wrap(changed))
        handler.on_update(wrap(changed), wrap(changed))
        handler.on_delete(wrap(changed))
    return reads


def without_skipped_conditions(reads: Reads) -> Reads:
    """`reads` less the types of conditions other than PodScheduled (see the module docstring)."""
    return {
        (path, value)
        for path, value in reads
        if not (path == ".status.conditions[*].type" and value != "PodScheduled")
        and path != ".status.conditions[*]"
    }


def test_the_pod_handler_reads_nothing_the_trim_drops() -> None:
    objects = api_pods()
    whole = handler_reads(objects, None)
    trimmed = handler_reads(objects, trim_pod)
    assert (".spec.containers[*].resources", "dict") in whole  # the reads were recorded
    assert (".status.conditions[*].type", "Ready") in whole  # read, and allowed to go
    assert without_skipped_conditions(whole) == without_skipped_conditions(trimmed)


def node_reads(trim: Callable[[Json], Json] | None) -> Reads:
    reads: Reads = set()
    cache = ClusterCache()
    handler = NodeHandler(cache, SchedulingQueue(), None)
    node = make_node("n1", gpus=8, domains="0-3,4-7", taints=[{"key": "k", "effect": "NoSchedule"}])
    node["metadata"]["managedFields"] = [{"manager": "kwok"}]
    node["status"].update(
        conditions=[{"type": "Ready", "status": "True"}],
        images=[{"names": ["img"], "sizeBytes": 1}],
        capacity={"cpu": "64"},
        nodeInfo={"kubeletVersion": "v1.37.2"},
    )
    beat = copy.deepcopy(node)
    beat["status"]["conditions"][0]["lastHeartbeatTime"] = TIME
    fewer = make_node("n1", gpus=4)

    def wrap(obj: Json) -> Any:
        obj = copy.deepcopy(obj)
        return recorded(trim(obj) if trim else obj, "", reads)

    handler.on_add(wrap(node))
    handler.on_update(wrap(node), wrap(beat))
    handler.on_update(wrap(beat), wrap(fewer))
    handler.on_delete(wrap(fewer))
    assert same_node(parse_node(node), parse_node(trim_node(copy.deepcopy(node))))
    return reads


def test_the_node_handler_reads_nothing_the_trim_drops() -> None:
    whole = node_reads(None)
    assert (".status.allocatable", "dict") in whole
    assert node_reads(trim_node) == whole
