"""A local Kubernetes control plane for tests, benchmarks and the demo.

`LocalCluster` starts etcd, kube-apiserver (RBAC on), kube-controller-manager, kwok, kube-scheduler,
a fake dcgm-exporter and Prometheus, all on loopback, from binaries that `hack/build-binaries.sh`
builds from their Go modules. `create_nodes` adds fake GPU nodes described by `NodeSpec`.
`kueue.Kueue` runs Kueue against a started cluster, for the tests that ask for it.
"""

from hack.localcluster.cluster import ClusterConfig, LocalCluster
from hack.localcluster.nodes import (
    G1,
    G2,
    G2_EXPANSION,
    SEED_NODE_TYPES,
    NodeSpec,
    create_nodes,
    node_manifest,
    wait_nodes_ready,
)
from hack.localcluster.processes import ComponentError

__all__ = [
    "G1",
    "G2",
    "G2_EXPANSION",
    "SEED_NODE_TYPES",
    "ClusterConfig",
    "ComponentError",
    "LocalCluster",
    "NodeSpec",
    "create_nodes",
    "node_manifest",
    "wait_nodes_ready",
]
