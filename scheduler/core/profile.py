"""The scheduling profile: which filter, narrow and score plugins run, in which order."""

from __future__ import annotations

from scheduler.config import SchedulerConfig
from scheduler.dra.cel_on_demand import CelOnDemand
from scheduler.framework.interface import ScorePlugin
from scheduler.framework.runtime import Framework
from scheduler.plugins.dynamic_resources import DynamicResources
from scheduler.plugins.gpu_fragmentation import GpuFragmentation
from scheduler.plugins.gpu_health import GpuHealth
from scheduler.plugins.gpu_sharing import ReplicaPlacement
from scheduler.plugins.inter_pod_affinity import InterPodAffinity
from scheduler.plugins.node_affinity import NodeAffinity
from scheduler.plugins.node_ports import NodePorts
from scheduler.plugins.nvlink import NVLink
from scheduler.plugins.resources import NodeResourcesFit
from scheduler.plugins.shared_gpus import DraSharedGpus
from scheduler.plugins.taints import NodeUnschedulable, TaintToleration
from scheduler.plugins.topology_spread import PodTopologySpread
from scheduler.plugins.volume_binding import VolumeBinding


def default_framework(settings: SchedulerConfig) -> Framework:
    """The profile: kube-scheduler's filters that matter for GPU pods, GPUHealth (sick GPUs do
    not count as free), the NVLink filter and score, the replicas of time-sliced GPUs packed or
    spread (GpuSharing), DynamicResources (devices of ResourceClaims, chosen NVLink-aware),
    preferred node affinity, and the GPU-fragmentation score that keeps free GPUs usable, the
    room on shared DRA GPUs included (left out when weighted 0)."""
    scoring = settings.scoring
    nvlink = NVLink(scoring.weights)
    affinity = NodeAffinity(weight=scoring.preferred_affinity_weight)
    pod_affinity = InterPodAffinity(weight=scoring.preferred_affinity_weight)
    spread = PodTopologySpread()
    claims = DynamicResources(CelOnDemand(), settings.dra.nvlink_domain_attribute, scoring.weights)
    sharing = ReplicaPlacement(
        settings.sharing.time_sliced_placement,
        settings.sharing.weight,
        settings.sharing.fail_requests_greater_than_one,
    )
    extra: list[ScorePlugin] = [sharing] if settings.sharing.weight > 0 else []
    if scoring.fragmentation_weight > 0:
        extra.append(GpuFragmentation(scoring.fragmentation_weight, DraSharedGpus()))
    return Framework(
        filters=[
            NodeUnschedulable(),
            TaintToleration(),
            affinity,
            NodePorts(),
            NodeResourcesFit(),
            GpuHealth(),
            nvlink,
            sharing,
            VolumeBinding(),
            spread,
            pod_affinity,
            claims,  # last: it allocates devices only on nodes the others let through
        ],
        scores=[nvlink, claims, affinity, pod_affinity, *extra, spread],
        seed=settings.scoring.seed,
        narrowers=[nvlink] if scoring.narrow_to_one_domain else [],
        pack_gang_members=scoring.pack_gang_members,
    )
