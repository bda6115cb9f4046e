"""The fake GPUs' identities: a stable UUID per (node, index), the one the exporter's series
carry (``UUID`` label) and the local cluster's ResourceSlices publish (``uuid`` attribute). Pure."""

from __future__ import annotations

import uuid

UUID_NAMESPACE = uuid.UUID("6f1c2a52-3c1e-4d4b-9a43-5b0d6c1f7e21")


def gpu_uuid(node: str, index: int) -> str:
    """A stable fake UUID for GPU ``index`` of ``node``."""
    return f"GPU-{uuid.uuid5(UUID_NAMESPACE, f'{node}/{index}')}"
