"""Options of a small control-plane benchmark run inside one integration test."""

from __future__ import annotations

from typing import Any

from hack.bench.control_plane_model import Options
from tests.scheduling import TEST_LABEL


def isolated_run(namespace: str, tag: str, **settings: Any) -> Options:
    """`Options` with `settings` whose pods go only to the nodes labelled for the test's
    `namespace`, are placed by the test's own gpu-scheduler (named `namespace`), and live in
    namespaces named after `tag`."""
    return Options(
        node_selector={TEST_LABEL: namespace},
        gpu_scheduler_name=namespace,
        namespace_prefix=f"{tag}-{namespace[-6:]}",
        **settings,
    )
