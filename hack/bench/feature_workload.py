"""The feature mix of the control-plane benchmark (`python -m hack.bench.control_plane
--features`), also used by `hack.bench.affinity`: which pod of the set carries which scheduling
feature, and what that adds to its manifest.

- `feature_kinds` (seeded): per pod, plain, preferred or required pod affinity to its group, a
  topology spread over its group, or a gang member (`GANG_SIZE` consecutive pods).
- `with_features`: a plain benchmark pod's manifest given its kind.
- `gang_sizes`, `pod_group_manifest`, `create_pod_groups`: the gangs' scheduling.k8s.io/v1beta1
  PodGroups, created before a run's pods.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from kubernetes_asyncio import client

from hack.localcluster.nodes import NODE_TYPE_LABEL

PLAIN, PREFERRED, REQUIRED, SPREAD, GANG = "plain", "preferred", "required", "spread", "gang"
FEATURE_SHARES: Mapping[str, float] = {
    PLAIN: 0.3,
    PREFERRED: 0.15,
    REQUIRED: 0.15,
    SPREAD: 0.2,
    GANG: 0.2,
}
"""Shares of the feature mix; a gang draw takes `GANG_SIZE` pods at once."""
GANG_SIZE = 4
FEATURE_GROUPS = 10
"""Pod i carries the label app=g<i mod FEATURE_GROUPS>; affinity and spread select by it."""
APP_LABEL = "bench.gpu-scheduler.io/app"
FEATURE_TOPOLOGY_KEY = NODE_TYPE_LABEL
"""The domain of pod affinity and spread: the node type (three domains of the seed types)."""
PODGROUP_GROUP, PODGROUP_VERSION, PODGROUP_PLURAL = "scheduling.k8s.io", "v1beta1", "podgroups"


def feature_kinds(count: int, seed: int) -> list[tuple[str, str]]:
    """Per pod index: (kind, gang name or ""), seeded. Kinds: plain; preferred pod affinity
    (weight 50) to its group; required pod affinity to its group (which the pod itself matches,
    so the first one fits); a topology spread over its group (maxSkew 2, DoNotSchedule on even
    indices, ScheduleAnyway on odd ones); a gang member (`GANG_SIZE` consecutive pods, a PodGroup
    with minCount = its members)."""
    rng = np.random.default_rng(seed + 1)
    names = list(FEATURE_SHARES)
    shares = np.asarray([FEATURE_SHARES[n] for n in names], dtype=float)  # shares: (kinds,)
    kinds: list[tuple[str, str]] = []
    while len(kinds) < count:
        kind = str(rng.choice(names, p=shares / shares.sum()))
        if kind == GANG:
            gang = f"gang-{len(kinds):05d}"
            kinds.extend([(GANG, gang)] * min(GANG_SIZE, count - len(kinds)))
        else:
            kinds.append((kind, ""))
    return kinds


def gang_sizes(kinds: Sequence[tuple[str, str]]) -> dict[str, int]:
    """Members of each gang of `feature_kinds`, by PodGroup name."""
    sizes: dict[str, int] = {}
    for kind, gang in kinds:
        if kind == GANG:
            sizes[gang] = sizes.get(gang, 0) + 1
    return sizes


def pod_group_manifest(name: str, members: int) -> dict[str, Any]:
    """A scheduling.k8s.io/v1beta1 PodGroup: a gang of `members` pods."""
    return {
        "apiVersion": f"{PODGROUP_GROUP}/{PODGROUP_VERSION}",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"schedulingPolicy": {"gang": {"minCount": members}}},
    }


def with_features(manifest: dict[str, Any], index: int, kind: str, gang: str) -> dict[str, Any]:
    """`manifest` (of `pod_manifest`) given pod `index`'s feature-mix kind (see `feature_kinds`);
    modified in place and returned."""
    group = {APP_LABEL: f"g{index % FEATURE_GROUPS}"}
    manifest["metadata"]["labels"] = dict(group)
    spec = manifest["spec"]
    term = {"labelSelector": {"matchLabels": group}, "topologyKey": FEATURE_TOPOLOGY_KEY}
    if kind == PREFERRED:
        spec["affinity"] = {
            "podAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 50, "podAffinityTerm": term}
                ]
            }
        }
    elif kind == REQUIRED:
        spec["affinity"] = {
            "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
        }
    elif kind == SPREAD:
        spec["topologySpreadConstraints"] = [
            {
                "maxSkew": 2,
                "topologyKey": FEATURE_TOPOLOGY_KEY,
                "whenUnsatisfiable": "DoNotSchedule" if index % 2 == 0 else "ScheduleAnyway",
                "labelSelector": {"matchLabels": group},
            }
        ]
    elif kind == GANG:
        spec["schedulingGroup"] = {"podGroupName": gang}
    return manifest


async def create_pod_groups(
    api: client.ApiClient, namespace: str, kinds: Sequence[tuple[str, str]]
) -> None:
    """The PodGroup of every gang of `kinds` in `namespace` (before any pod: a member waits
    for its PodGroup anyway); raises the API error of a failed create."""
    custom = client.CustomObjectsApi(api)
    for gang, members in gang_sizes(kinds).items():
        await custom.create_namespaced_custom_object(
            PODGROUP_GROUP,
            PODGROUP_VERSION,
            namespace,
            PODGROUP_PLURAL,
            pod_group_manifest(gang, members),
        )
