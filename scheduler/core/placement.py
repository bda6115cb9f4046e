"""A scheduling decision: the node and the GPU indices inside it (`Placement`, `place`).

The scheduling cycle (`scheduler.core.cycle`) and the gang cycle (`scheduler.core.gang_cycle`)
make one; the binding cycle (`scheduler.core.binding_cycle`) sends it with the Binding, its GPU
indices and NVLink domain as annotations. The offline tools choose GPU indices with `place` too.
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.framework.runtime import Evaluation
from scheduler.model.gpu_sharing import replicas_requested
from scheduler.model.objects import NVLINK_DOMAIN_ANNOTATION, PodInfo
from scheduler.model.resources import GPU
from scheduler.state.cache import ClusterCache
from topology.occupancy import GPUS_ANNOTATION, NO_DOMAIN, choose_gpus
from topology.replicas import PACK


@dataclass(frozen=True)
class Placement:
    """A decision: the node, the GPU indices inside it, their NVLink domain, the score."""

    node: str
    gpus: tuple[int, ...]
    domain: int
    score: float
    devices: tuple[str, ...] = ()
    """DRA devices allocated to the pod's claims, "claim: pool/device,..." per claim."""

    def annotations(self) -> dict[str, str]:
        if not self.gpus:
            return {}
        return {
            GPUS_ANNOTATION: ",".join(str(g) for g in self.gpus),
            NVLINK_DOMAIN_ANNOTATION: str(self.domain),
        }

    def describe(self) -> str:
        if self.devices:
            return f"devices {'; '.join(self.devices)}; score {self.score:.0f}"
        if not self.gpus:
            return f"score {self.score:.0f}"
        gpus = ",".join(str(g) for g in self.gpus)
        where = (
            "across NVLink domains"
            if self.domain == NO_DOMAIN
            else f"in NVLink domain {self.domain}"
        )
        return f"GPUs {gpus} {where}; score {self.score:.0f}"


def place(
    cache: ClusterCache, pod: PodInfo, evaluation: Evaluation, replica_policy: str = PACK
) -> Placement:
    """The GPUs to take on the chosen node (best NVLink domain, see `topology.occupancy`); on a
    node sharing its GPUs, the GPUs to take one replica of each, by `replica_policy`
    (`topology.replicas`), in no NVLink domain. Never a GPU in use (whole) or without a free
    replica (shared), nor one reported sick (`ClusterCache.set_sick_gpus`)."""
    node = cache.names[evaluation.chosen]
    score = float(evaluation.total[evaluation.chosen])
    sharing = cache.nodes[node].sharing
    if sharing is not None:
        count = replicas_requested(pod.gpus, pod.scalar, sharing)
        gpu_count = cache.nodes[node].topology.gpu_count
        row = evaluation.chosen
        sick = cache.gpu_sick[row, :gpu_count]  # sick: (gpus,)
        replicas = cache.replicas.choose(row, gpu_count, count, replica_policy, sick)
        if len(replicas) != count:  # the GpuSharing filter guarantees them
            raise RuntimeError(f"node {node} has fewer than {count} GPUs with a free replica")
        return Placement(node, replicas, NO_DOMAIN, score)
    if pod.gpus == 0 or not cache.allocatable[evaluation.chosen, GPU]:
        return Placement(node, (), NO_DOMAIN, score)  # no GPUs, or they come from DRA there
    topology = cache.nodes[node].topology
    choice = choose_gpus(topology, cache.node_gpus_unavailable(node), pod.gpus)
    if choice is None:  # filters guarantee enough free GPUs; keep the cycle safe regardless
        raise RuntimeError(f"node {node} has fewer than {pod.gpus} free GPUs after filtering")
    return Placement(node, tuple(choice.gpus), int(choice.domain), score)
