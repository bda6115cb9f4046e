"""The real node's DRA driver: Kubernetes' own DRA test driver as kubelet's plugin.

    driver = DraDriver(cluster, processes, DriverPaths(...))
    driver.start()   # after kubelet: its ResourceSlice is published, DEVICE_CLASS exists
    driver.stop()    # before kubelet stops; slices and class deleted

The program is `k8s.io/kubernetes/test/e2e/dra/test-driver` of the pinned Kubernetes version
(`hack/build-binaries.sh --node` builds it), run as `test-driver kubelet-plugin` (its
`app/server.go`). It registers with kubelet through `<kubelet root>/plugins_registry`, serves its
DRA socket under `<kubelet root>/plugins/<driver name>`, and publishes one ResourceSlice for the
node: pool `<node name>`, `NUM_DEVICES` devices `device-00`, `device-01`, ... without attributes.

Its driver name (`--drivername`, `DRIVER_NAME`) is NVIDIA's, `gpu.nvidia.com`: gpu-scheduler maps
only that driver's whole GPUs to NVLink domains (`scheduler.dra.domains`), so under this name the
real node's devices have domains as a GPU node's do. Having no UUID or PCI bus ID attribute and
not being named `gpu-N`, they are named by neither domain annotation; they get the default layout
for their count (`topology.domains.default_domains`: for 4, the pairs `device-00,device-01` and
`device-02,device-03`). Its DeviceClass `DEVICE_CLASS` selects every device of the driver, the
GPUs of kwok DRA nodes in the same cluster too: pods asking for it pick the real node by its label
(`realnode.REAL_NODE_LABEL`). The kwok nodes' class `gpu.nvidia.com` (with `extendedResourceName
nvidia.com/gpu`) asks for the `type` attribute, which the test driver does not publish, so the real
node's devices never serve `nvidia.com/gpu`.

For each claim kubelet prepares, it writes one CDI spec per request of the claim into the CDI
folder (the one containerd 2 reads, `containerd.RuntimeFolders.cdi_specs`), whose only edit is
environment variables (`app/kubeletplugin.go`, nodePrepareResource): `claim_<claim>_<request>=true`
(every character outside [a-zA-Z0-9] replaced by `_`; `claim_env_name`), plus `user_<key>=<value>`
and `admin_<key>=<value>` for the string map of an opaque config for this driver in the claim or
its DeviceClass. It tells kubelet which pool and device each result is; kubelet records that in
its DRA checkpoint `<kubelet root>/dra_manager_state` (`k8s.io/kubernetes pkg/kubelet/cm/dra/state`;
`prepared_devices` reads it).

It authenticates as the node (`system:node:<name>`, group `system:nodes`): the Node authorizer
allows a node to create ResourceSlices and to list and watch those with its own `spec.nodeName`
(`k8s.io/kubernetes plugin/pkg/auth/authorizer/node/node_authorizer.go`), to get its Node object
(the slices' owner) and the claims of the pods bound to it, which is all the driver asks for.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from hack.localcluster.dra import DRIVER
from hack.localcluster.processes import ProcessGroup

if TYPE_CHECKING:
    from hack.localcluster.cluster import LocalCluster

DRIVER_NAME = DRIVER
"""The name the test driver registers and publishes under (see the module docstring)."""
DEVICE_CLASS = "real-node-test-driver"
NUM_DEVICES = 4
READY_TIMEOUT_S = 60.0
CHECKPOINT_FILE = "dra_manager_state"


@dataclass(frozen=True)
class DriverPaths:
    """What the driver runs and where it talks to kubelet and containerd."""

    binary: Path
    kubeconfig: Path
    kubelet_root: Path
    cdi_specs: Path


@dataclass(frozen=True)
class PreparedDevice:
    """One device kubelet prepared for a claim, as its DRA checkpoint records it."""

    namespace: str
    claim: str
    driver: str
    pool: str
    device: str
    requests: tuple[str, ...]
    cdi_ids: tuple[str, ...]


def driver_argv(paths: DriverPaths, node_name: str, num_devices: int) -> list[str]:
    """The command line of the test driver's kubelet plugin for `node_name`."""
    return [
        str(paths.binary),
        f"--kubeconfig={paths.kubeconfig}",
        f"--drivername={DRIVER_NAME}",
        "kubelet-plugin",
        f"--node-name={node_name}",
        f"--plugin-registration-path={paths.kubelet_root / 'plugins_registry'}",
        f"--datadir={paths.kubelet_root / 'plugins'}",
        f"--cdi-dir={paths.cdi_specs}",
        f"--num-devices={num_devices}",
    ]


def device_class_manifest() -> dict[str, object]:
    """`DEVICE_CLASS`: every device of `DRIVER_NAME`."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": DEVICE_CLASS},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER_NAME}"'}}]},
    }


def claim_env_name(claim: str, request: str) -> str:
    """The variable the driver's CDI spec sets to "true" in a container given request `request`
    of claim `claim` (a subrequest `request/sub` counts as `request`)."""
    base = request.split("/", 1)[0]
    return re.sub(r"[^a-zA-Z0-9]", "_", f"claim_{claim}_{base}")


def prepared_devices(checkpoint: str) -> list[PreparedDevice]:
    """The devices in kubelet's DRA checkpoint text (a JSON object whose `Data` is the JSON of
    the claims' states), in checkpoint order; empty for an empty checkpoint. Raises ValueError
    when the text is not such a checkpoint."""
    try:
        data = json.loads(json.loads(checkpoint)["Data"])
        states = data.get("ClaimInfoStateList") or []
        devices = []
        for state in states:
            for driver, driver_state in sorted((state.get("DriverState") or {}).items()):
                for device in driver_state.get("Devices") or []:
                    devices.append(
                        PreparedDevice(
                            namespace=state["Namespace"],
                            claim=state["ClaimName"],
                            driver=driver,
                            pool=device["PoolName"],
                            device=device["DeviceName"],
                            requests=tuple(device.get("RequestNames") or ()),
                            cdi_ids=tuple(device.get("CDIDeviceIDs") or ()),
                        )
                    )
        return devices
    except (KeyError, TypeError, AttributeError) as error:
        raise ValueError(f"not a DRA checkpoint: {error!r}") from error


class DraDriver:
    """The test driver's kubelet plugin for one real node; see the module docstring."""

    def __init__(
        self,
        cluster: LocalCluster,
        processes: ProcessGroup,
        paths: DriverPaths,
        node_name: str,
        num_devices: int = NUM_DEVICES,
    ) -> None:
        self.cluster = cluster
        self.processes = processes
        self.paths = paths
        self.node_name = node_name
        self.num_devices = num_devices
        self._manifest = paths.cdi_specs.parent / "device-class.yaml"

    def start(self) -> None:
        """Create `DEVICE_CLASS`, start the plugin and wait until its ResourceSlice is published
        with every device. Raises ComponentError naming its log when it does not get there."""
        self.paths.cdi_specs.mkdir(parents=True, exist_ok=True)
        # The driver makes the plugins folder but not its own socket folder inside it.
        (self.paths.kubelet_root / "plugins" / DRIVER_NAME).mkdir(parents=True, exist_ok=True)
        self._manifest.write_text(yaml.safe_dump(device_class_manifest()))
        self.cluster.kubectl("apply", "-f", str(self._manifest))
        component = self.processes.start(
            "dra-driver", driver_argv(self.paths, self.node_name, self.num_devices)
        )
        self.processes.wait_ready(component, self.published, READY_TIMEOUT_S)

    def slices(self) -> list[dict[str, object]]:
        """This node's ResourceSlices of `DRIVER_NAME`."""
        result = self.cluster.kubectl(
            "get",
            "resourceslices",
            f"--field-selector=spec.nodeName={self.node_name},spec.driver={DRIVER_NAME}",
            "-o",
            "json",
            check=False,
        )
        if result.returncode != 0:
            return []
        items: list[dict[str, object]] = json.loads(result.stdout).get("items", [])
        return items

    def published(self) -> bool:
        """Whether the node's slices hold `num_devices` devices."""
        count = 0
        for item in self.slices():
            spec = item.get("spec")
            count += len(spec.get("devices") or []) if isinstance(spec, dict) else 0
        return count == self.num_devices

    def checkpoint(self) -> list[PreparedDevice]:
        """What kubelet has prepared now (`prepared_devices` of its checkpoint); empty before
        kubelet wrote one."""
        path = self.paths.kubelet_root / CHECKPOINT_FILE
        return prepared_devices(path.read_text()) if path.is_file() else []

    def stop(self) -> None:
        """Stop the plugin (SIGTERM: it removes its sockets), delete the node's slices of this
        driver and `DEVICE_CLASS`. Safe to call when it never started."""
        for component in self.processes.components:
            if component.name == "dra-driver":
                component.stop()
        if self.cluster.binaries is None:
            return
        self.cluster.kubectl(
            "delete",
            "resourceslices",
            f"--field-selector=spec.nodeName={self.node_name},spec.driver={DRIVER_NAME}",
            "--ignore-not-found",
            check=False,
        )
        self.cluster.kubectl(
            "delete", "deviceclass", DEVICE_CLASS, "--ignore-not-found", check=False
        )
