"""GPUs the NVIDIA device plugin shares by time-slicing or MPS, read from a node's labels.

With `sharing.timeSlicing.resources[].replicas: N` (or `sharing.mps...`) in its configuration
the device plugin advertises every physical GPU N times: `nvidia.com/gpu: GPUs x N`, or
`nvidia.com/gpu.shared: GPUs x N` with `renameByDefault: true`. Its labeller (GPU feature
discovery) adds `nvidia.com/gpu.replicas=N`, `nvidia.com/gpu.sharing-strategy=time-slicing|mps`
(`none` without sharing), `nvidia.com/gpu.count=<physical GPUs>`, and appends `-SHARED` to
`nvidia.com/gpu.product` when the resource is not renamed. Each replica is a device
`<GPU UUID>::<replica>`; which physical GPU a pod's replica comes from is the plugin's choice
(its `--shared-devices-allocation-policy`, `distributed` by default), made when the kubelet
admits the pod.

`parse_gpu_sharing` turns that into a `GpuSharing`: the strategy, replicas per GPU, the number
of physical GPUs and the resource name replicas are advertised under. The contract:

- a node is shared when its sharing-strategy label is `time-slicing` or `mps` and its replicas
  label is an integer >= 2 (the plugin refuses fewer); otherwise it is not (None), and its
  `nvidia.com/gpu` are whole GPUs as before;
- the resource is `nvidia.com/gpu.shared` when the node advertises it, else `nvidia.com/gpu`;
- the physical GPUs are the count label when it is a positive integer, else the advertised
  replicas divided by N, rounded up; advertised replicas that are not GPUs x N (replicas of an
  unhealthy GPU withdrawn) are allowed: the advertised number bounds what pods may take;
- bad labels on a node that says it shares are reported as `FieldError`s and the node is read as
  not shared.

`replicas_requested` is how many replicas a pod takes on such a node: its request of the
node's shared resource. A request above one takes that many replicas (one per distinct
physical GPU, see `topology.replicas`) unless the node refuses it (`refuses_multiple`: MPS
nodes, whose plugin sets `failRequestsGreaterThanOne` by default, or time-slicing nodes when
the scheduler is told the plugin does).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from scheduler.model.fields import FieldError
from topology.text import quote

GPU_RESOURCE = "nvidia.com/gpu"
SHARED_RESOURCE = "nvidia.com/gpu.shared"
STRATEGY_LABEL = "nvidia.com/gpu.sharing-strategy"
REPLICAS_LABEL = "nvidia.com/gpu.replicas"
COUNT_LABEL = "nvidia.com/gpu.count"
TIME_SLICING = "time-slicing"
MPS = "mps"
STRATEGIES = (TIME_SLICING, MPS)
MIN_REPLICAS = 2
"""The device plugin rejects `replicas` below 2."""
MAX_REPLICAS = 1024
"""Replicas per GPU the scheduler models (each is a count in an int32 column)."""


@dataclass(frozen=True)
class GpuSharing:
    """How a node's device plugin shares its GPUs: `replicas` accesses to each of `gpus`
    physical GPUs, advertised as `resource`."""

    strategy: str
    replicas: int
    gpus: int
    resource: str

    def refuses_multiple(self, fail_requests_greater_than_one: bool) -> bool:
        """Whether the plugin fails a container asking for more than one replica: MPS always
        (its default), time-slicing when configured so."""
        return self.strategy == MPS or fail_requests_greater_than_one


def _positive_int(text: str | None) -> int | None:
    if text is None or not text.isdigit() or len(text) > 9:
        return None
    value = int(text)
    return value if value > 0 else None


def parse_gpu_sharing(
    labels: Mapping[str, str], advertised: Mapping[str, int], errors: list[FieldError]
) -> GpuSharing | None:
    """The node's sharing (see the module docstring); `advertised` maps resource name to the
    allocatable amount. None for a node that does not share its GPUs."""
    strategy = labels.get(STRATEGY_LABEL)
    if strategy not in STRATEGIES:
        return None
    where = f"metadata.labels[{REPLICAS_LABEL}]"
    replicas = _positive_int(labels.get(REPLICAS_LABEL))
    if replicas is None or not MIN_REPLICAS <= replicas <= MAX_REPLICAS:
        errors.append(
            FieldError(
                where,
                f"must be an integer {MIN_REPLICAS}..{MAX_REPLICAS} on a node sharing its GPUs "
                f"({strategy}), got {quote(labels.get(REPLICAS_LABEL))}; GPUs read as whole",
            )
        )
        return None
    resource = SHARED_RESOURCE if advertised.get(SHARED_RESOURCE, 0) > 0 else GPU_RESOURCE
    total = advertised.get(resource, 0)
    gpus = _positive_int(labels.get(COUNT_LABEL))
    if gpus is None:
        gpus = math.ceil(total / replicas)
    elif total > gpus * replicas:
        errors.append(
            FieldError(
                f"status.allocatable.{resource}",
                f"{total} replicas exceed {gpus} GPUs x {replicas}; GPUs read as whole",
            )
        )
        return None
    return GpuSharing(strategy, replicas, gpus, resource)


def replicas_requested(gpus: int, scalar: Mapping[str, int], sharing: GpuSharing) -> int:
    """Replicas a pod asking for `gpus` nvidia.com/gpu and the extended resources `scalar`
    takes on a node with `sharing`."""
    return gpus if sharing.resource == GPU_RESOURCE else scalar.get(SHARED_RESOURCE, 0)
