"""Plain-data readings of the scheduler's state for the scrape-time metrics of
`metrics.collectors` (which never see the cache itself)."""

from __future__ import annotations

from metrics.collectors import DomainGPUs
from scheduler.cache import ClusterCache


def domain_gpus(cache: ClusterCache) -> list[DomainGPUs]:
    """Allocatable and free GPUs of every NVLink domain of every node in the cache; free GPUs
    are those no bound, assumed or reserved pod holds. Nodes without GPUs have no domains."""
    found: list[DomainGPUs] = []
    for name, node in cache.nodes.items():
        row = cache.row_of[name]
        count = node.topology.domain_count
        sizes = cache.domain_size[row, :count].tolist()  # sizes: (domains,)
        free = cache.free_per_domain[row, :count].tolist()  # free: (domains,)
        found.extend(
            DomainGPUs(name, domain, int(size), int(left))
            for domain, (size, left) in enumerate(zip(sizes, free, strict=True))
        )
    return found
