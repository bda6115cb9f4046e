"""The real node's kubelet and kube-proxy configurations (`realnode.RealNode` writes them as
YAML): plain data, for the pinned Kubernetes version's config APIs
(`kubelet.config.k8s.io/v1beta1`, `kubeproxy.config.k8s.io/v1alpha1`).
"""

from __future__ import annotations

from pathlib import Path

from hack.localcluster.hostcleanup import CGROUP_NAME


def kubelet_config(
    socket: Path,
    ca_file: Path,
    address: str,
    ports: tuple[int, int],
    pod_logs: Path,
    max_pods: int,
) -> dict[str, object]:
    """The KubeletConfiguration: cgroupfs on cgroup v1 (refused since 1.35 unless
    `failCgroupV1: false`), its own cgroup root, client-certificate authentication with every
    authenticated request allowed (the API server's client is the admin), no image garbage
    collection (the offline images cannot be pulled again), eviction only near real exhaustion."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": f"/{CGROUP_NAME}",
        "containerRuntimeEndpoint": f"unix://{socket}",
        "address": address,
        "port": ports[0],
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": ports[1],
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": str(ca_file)},
        },
        "authorization": {"mode": "AlwaysAllow"},
        "podLogsDir": str(pod_logs),
        "maxPods": max_pods,
        "failSwapOn": False,
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "mergeDefaultEvictionSettings": False,
        "serializeImagePulls": False,
        "registerNode": True,
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
        "protectKernelDefaults": False,
    }


def kube_proxy_config(
    kubeconfig: Path, node_name: str, cluster_cidr: str, healthz_port: int, metrics_port: int
) -> dict[str, object]:
    """KubeProxyConfiguration: iptables mode; NodePorts on this machine's primary address only,
    no localhost NodePorts (which would need route_localnet); conntrack sysctls left alone."""
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "mode": "iptables",
        "hostnameOverride": node_name,
        "clusterCIDR": cluster_cidr,
        "healthzBindAddress": f"127.0.0.1:{healthz_port}",
        "metricsBindAddress": f"127.0.0.1:{metrics_port}",
        "nodePortAddresses": ["primary"],
        "iptables": {"localhostNodePorts": False, "masqueradeAll": False},
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
        },
    }
