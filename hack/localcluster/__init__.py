"""A local Kubernetes control plane for tests, benchmarks and the demo.

`LocalCluster` starts etcd, kube-apiserver (RBAC on), kube-controller-manager, kwok, kube-scheduler,
a fake dcgm-exporter and Prometheus, all on loopback, from binaries that `hack/build-binaries.sh`
builds from their Go modules. `create_nodes` adds fake GPU nodes described by `NodeSpec`: their GPUs
published as `nvidia.com/gpu` capacity (a device plugin's), or, for `gpu_api="dra"` (`D8`, `D4`),
as a ResourceSlice of NVIDIA's DRA driver with its `gpu.nvidia.com` DeviceClass (`S8`: GPUs
shared by memory capacity, DRAConsumableCapacity); `delete_nodes`
as a ResourceSlice of NVIDIA's DRA driver with its `gpu.nvidia.com` DeviceClass, or time-sliced
by the device plugin (`replicas`, `T8`); `delete_nodes`
removes nodes with their slices, and `temporary_nodes` holds nodes for one block.
`kueue.Kueue` runs Kueue against a started cluster, for the tests that ask for it. `helm` builds
the pinned helm and runs it on the chart `charts/gpu-scheduler`, whose copies of manifests/ files
`chart_files` keeps current.
"""

from hack.localcluster.cluster import ClusterConfig, LocalCluster
from hack.localcluster.nodes import (
    D4,
    D8,
    DRA_NODE_TYPES,
    G1,
    G2,
    G2_EXPANSION,
    M8,
    PARTITIONED_NODE_TYPES,
    S8,
    SEED_NODE_TYPES,
    SHARED_NODE_TYPES,
    T8,
    NodeSpec,
    create_nodes,
    delete_gpu_device_class,
    delete_nodes,
    node_manifest,
    temporary_nodes,
    wait_nodes_ready,
)
from hack.localcluster.processes import ComponentError

__all__ = [
    "D4",
    "D8",
    "DRA_NODE_TYPES",
    "G1",
    "G2",
    "G2_EXPANSION",
    "M8",
    "PARTITIONED_NODE_TYPES",
    "S8",
    "SEED_NODE_TYPES",
    "SHARED_NODE_TYPES",
    "T8",
    "ClusterConfig",
    "ComponentError",
    "LocalCluster",
    "NodeSpec",
    "create_nodes",
    "delete_gpu_device_class",
    "delete_nodes",
    "node_manifest",
    "temporary_nodes",
    "wait_nodes_ready",
]
