"""Plain-data readings of the scheduler's state for the scrape-time metrics of
`metrics.collectors` (which never see the cache itself)."""

from __future__ import annotations

import numpy as np

from metrics.collectors import DomainGPUs
from scheduler.state.cache import ClusterCache


def domain_gpus(cache: ClusterCache) -> list[DomainGPUs]:
    """Allocatable and free GPUs of every NVLink domain of every node in the cache; free GPUs
    are those no bound, assumed or reserved pod holds. Nodes without GPUs have no domains.
    One pass over the cache's arrays (a scrape runs on the event loop)."""
    names = list(cache.nodes)
    if not names:
        return []
    rows = np.fromiter((cache.row_of[n] for n in names), dtype=np.intp, count=len(names))
    counts = np.fromiter(  # counts: (nodes,)
        (cache.nodes[n].topology.domain_count for n in names), dtype=np.intp, count=len(names)
    )
    width = cache.domain_size.shape[1]
    present = np.arange(width) < counts[:, None]  # present: (nodes, domains)
    node_index, domain = np.nonzero(present)  # (cells,) each, node-major
    sizes = cache.domain_size[rows][present]  # sizes: (cells,)
    free = cache.free_per_domain[rows][present]  # free: (cells,)
    return [
        DomainGPUs(names[i], d, size, left)
        for i, d, size, left in zip(
            node_index.tolist(), domain.tolist(), sizes.tolist(), free.tolist(), strict=True
        )
    ]
