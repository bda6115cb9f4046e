"""The real node's pure parts: the OCI image writer, the generated configs, the host-state diff,
the DRA driver's command line and kubelet's DRA checkpoint, and `build-binaries.sh --node`
(against the stand-in `go` of test_build_binaries_output)."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from hack.localcluster import hoststate
from hack.localcluster.containerd import (
    BRIDGE,
    PAUSE_IMAGE,
    RuntimeBinaries,
    RuntimeFolders,
    cni_config,
    containerd_config,
)
from hack.localcluster.dradriver import (
    DEVICE_CLASS,
    DRIVER_NAME,
    DriverPaths,
    PreparedDevice,
    claim_env_name,
    device_class_manifest,
    driver_argv,
    prepared_devices,
)
from hack.localcluster.hostcleanup import CGROUP_NAME, HostRecord
from hack.localcluster.nodeconfig import kube_proxy_config, kubelet_config
from hack.localcluster.oci import (
    CONTAINERD_NAME_ANNOTATION,
    LAYER_MEDIA_TYPE,
    ImageFile,
    goarch,
    write_image_archive,
)
from tests.unit.test_build_binaries_output import build


def _members(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive) as tar:
        return {
            m.name: tar.extractfile(m).read()  # type: ignore[union-attr]
            for m in tar.getmembers()
            if m.isfile()
        }


def test_image_archive_is_an_oci_layout_with_content_addressed_blobs(tmp_path: Path) -> None:
    archive = tmp_path / "pause.tar"
    digest = write_image_archive(
        archive, "localhost/x/pause:1", [ImageFile("/bin/pause", b"\x7fELF...")], ["/bin/pause"]
    )
    members = _members(archive)
    assert json.loads(members["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    for name, data in members.items():
        if name.startswith("blobs/sha256/"):
            assert hashlib.sha256(data).hexdigest() == name.removeprefix("blobs/sha256/")
    index = json.loads(members["index.json"])
    (entry,) = index["manifests"]
    assert entry["digest"] == digest
    assert entry["annotations"][CONTAINERD_NAME_ANNOTATION] == "localhost/x/pause:1"
    manifest = json.loads(members[f"blobs/sha256/{digest.removeprefix('sha256:')}"])
    config_blob = members[f"blobs/sha256/{manifest['config']['digest'].removeprefix('sha256:')}"]
    config = json.loads(config_blob)
    assert config["config"]["Entrypoint"] == ["/bin/pause"]
    assert config["rootfs"]["diff_ids"] == [manifest["layers"][0]["digest"]]
    assert manifest["layers"][0]["mediaType"] == LAYER_MEDIA_TYPE
    layer = members[f"blobs/sha256/{manifest['layers'][0]['digest'].removeprefix('sha256:')}"]
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        names = {m.name: m for m in tar.getmembers()}
        assert names["bin"].isdir()
        assert names["bin/pause"].mode == 0o755 and names["bin/pause"].uid == 0
        assert tar.extractfile("bin/pause").read() == b"\x7fELF..."  # type: ignore[union-attr]


def test_image_archive_is_reproducible(tmp_path: Path) -> None:
    files = [ImageFile("/probe", b"binary")]
    first = write_image_archive(tmp_path / "a.tar", "localhost/p:1", files, ["/probe"])
    second = write_image_archive(tmp_path / "b.tar", "localhost/p:1", files, ["/probe"])
    assert first == second
    assert (tmp_path / "a.tar").read_bytes() == (tmp_path / "b.tar").read_bytes()


@pytest.mark.parametrize(
    ("name", "path", "error"),
    [
        ("localhost/no-tag", "/x", "needs a tag"),
        ("localhost:5000/repo", "/x", "needs a tag"),
        ("localhost/p:1", "relative", "must be absolute"),
    ],
)
def test_image_writer_rejects_bad_names_and_paths(
    tmp_path: Path, name: str, path: str, error: str
) -> None:
    with pytest.raises(ValueError, match=error):
        write_image_archive(tmp_path / "i.tar", name, [ImageFile(path, b"")], ["/x"])
    assert not (tmp_path / "i.tar").exists()


def test_goarch_names_the_oci_architecture() -> None:
    assert goarch("x86_64") == "amd64" and goarch("aarch64") == "arm64"
    with pytest.raises(ValueError, match="unknown machine architecture"):
        goarch("pdp11" * 20)


RUNTIME = RuntimeBinaries(
    containerd=Path("/c/containerd"),
    ctr=Path("/c/ctr"),
    shim=Path("/c/containerd-shim-runc-v2"),
    runc=Path("/usr/sbin/runc"),
    cni_bin_dir=Path("/usr/lib/cni"),
)
FOLDERS = RuntimeFolders(
    containerd=Path("/w/node/containerd"),
    socket=Path("/run/gpus-node-1/containerd.sock"),
    cni_conf=Path("/w/cni"),
    cdi_specs=Path("/w/node/cdi"),
)


def test_containerd_config_keeps_state_in_its_folder_and_restricts_oom_when_asked() -> None:
    restricted = containerd_config(FOLDERS, RUNTIME, restrict_oom=True)
    assert restricted.startswith("version = 3\n")
    assert "restrict_oom_score_adj = true" in restricted
    assert f'sandbox = "{PAUSE_IMAGE}"' in restricted
    assert 'root = "/w/node/containerd/root"' in restricted
    assert f'address = "{FOLDERS.socket}"' in restricted
    assert 'path = "/w/node/containerd/opt"' in restricted
    assert "SystemdCgroup = false" in restricted
    free = containerd_config(FOLDERS, RUNTIME, restrict_oom=False)
    assert "restrict_oom_score_adj = false" in free


def test_containerd_config_is_version_3_with_cdi_from_the_node_folder_and_its_own_shim() -> None:
    config = tomllib.loads(containerd_config(FOLDERS, RUNTIME, restrict_oom=False))
    plugins = config["plugins"]
    runtime = plugins["io.containerd.cri.v1.runtime"]
    assert config["version"] == 3
    assert runtime["cdi_spec_dirs"] == ["/w/node/cdi"]
    assert "enable_cdi" not in runtime  # always on in containerd 2; no such key
    assert runtime["cni"] == {"bin_dirs": ["/usr/lib/cni"], "conf_dir": "/w/cni", "max_conf_num": 1}
    runc = runtime["containerd"]["runtimes"]["runc"]
    assert runc["runtime_path"] == "/c/containerd-shim-runc-v2"
    assert runc["options"] == {
        "BinaryName": "/usr/sbin/runc",
        "Root": "/w/node/containerd/runc",
        "SystemdCgroup": False,
    }
    images = plugins["io.containerd.cri.v1.images"]
    assert images["pinned_images"] == {"sandbox": PAUSE_IMAGE}
    assert plugins["io.containerd.nri.v1.nri"] == {"disable": True}
    assert plugins["io.containerd.grpc.v1.cri"]["stream_server_address"] == "127.0.0.1"


def test_kubelet_config_accepts_cgroup_v1_with_cgroupfs_under_its_own_root() -> None:
    config = kubelet_config(
        Path("/s.sock"), Path("/ca.crt"), "192.0.2.9", (10250, 10248), Path("/logs"), 30
    )
    assert config["failCgroupV1"] is False
    assert config["cgroupDriver"] == "cgroupfs"
    assert config["cgroupRoot"] == f"/{CGROUP_NAME}"
    assert config["containerRuntimeEndpoint"] == "unix:///s.sock"
    assert config["readOnlyPort"] == 0 and config["address"] == "192.0.2.9"
    assert (config["port"], config["healthzPort"]) == (10250, 10248)
    assert config["authentication"]["anonymous"] == {"enabled": False}  # type: ignore[index]


def test_cni_bridge_is_the_gateway_without_masquerade() -> None:
    config = cni_config("10.244.0.0/24", Path("/w/ipam"))
    plugins: Any = config["plugins"]
    (bridge,) = plugins
    assert bridge["bridge"] == BRIDGE and len(BRIDGE) <= 15  # IFNAMSIZ
    assert bridge["isGateway"] is True and bridge["ipMasq"] is False
    assert bridge["ipam"]["ranges"] == [[{"subnet": "10.244.0.0/24"}]]
    assert bridge["ipam"]["dataDir"] == "/w/ipam"


def test_kube_proxy_leaves_localhost_and_conntrack_alone() -> None:
    config = kube_proxy_config(Path("/k"), "real-node", "10.244.0.0/16", 1, 2)
    assert config["mode"] == "iptables"
    assert config["iptables"]["localhostNodePorts"] is False  # type: ignore[index]
    assert config["conntrack"]["maxPerCore"] == 0  # type: ignore[index]
    assert config["healthzBindAddress"] == "127.0.0.1:1"


def test_host_state_differences_name_what_appeared_and_what_went() -> None:
    empty = hoststate.HostState((), (), (), (), (), (), ())
    changed = replace(empty, links=("gpus-cni0",), sysctls=("net/ipv4/ip_forward=1",))
    assert hoststate.differences(empty, empty) == []
    assert hoststate.differences(empty, changed) == [
        "+ links: gpus-cni0",
        "+ sysctls: net/ipv4/ip_forward=1",
    ]
    assert hoststate.differences(changed, empty) == [
        "- links: gpus-cni0",
        "- sysctls: net/ipv4/ip_forward=1",
    ]
    many = replace(empty, mounts=tuple(f"/m/{i}" for i in range(100)))
    assert len(hoststate.differences(empty, many, limit=5)) == 5


def test_build_binaries_builds_the_node_only_when_asked(tmp_path: Path) -> None:
    default = build(tmp_path)
    assert default.returncode == 0, default.stderr
    assert "kubernetes-node" not in default.stderr and "NODE_IMAGES_BIN" not in default.stdout
    assert not list((tmp_path / "cache" / "bin").glob("kubernetes-node-*"))

    node = build(tmp_path, GPU_SCHEDULER_REAL_NODE="1")
    assert node.returncode == 0, node.stderr
    folders = dict(line.split("=", 1) for line in node.stdout.splitlines() if "=" in line)
    assert Path(folders["KUBERNETES_NODE_BIN"], "kubelet").is_file()
    assert Path(folders["KUBERNETES_NODE_BIN"], "kube-proxy").is_file()
    assert Path(folders["NODE_IMAGES_BIN"], "pause").is_file()
    assert Path(folders["NODE_IMAGES_BIN"], "probe").is_file()
    assert Path(folders["DRA_DRIVER_BIN"], "test-driver").is_file()
    for binary in ("containerd", "ctr", "containerd-shim-runc-v2"):
        assert Path(folders["CONTAINERD_BIN"], binary).is_file()
    # The control plane was cached by the first run: only the node's parts were built (kubelet
    # and kube-proxy, the DRA driver, containerd, the images).
    assert node.stderr.count(" built in ") == 4, node.stderr
    assert not list((tmp_path / "cache" / "bin").glob("*.tmp"))


def test_host_record_round_trips_through_the_lock_file_text() -> None:
    record = HostRecord(
        folder=Path("/w/node"),
        socket_dir=Path("/run/gpus-node-x"),
        sysctls={"kernel/panic": "1"},
        nft_tables=frozenset({"ip filter"}),
        created_paths=(Path("/var/lib/cni"),),
    )
    assert HostRecord.from_json(record.to_json()) == record
    # A clean stop leaves an empty record; garbage is no record either.
    assert HostRecord(folder=Path("/w/node")).to_json() == ""
    for text in ("", "pid 12, folder /w", "[]", '{"folder": "/w"}'):
        assert HostRecord.from_json(text) is None


def test_dra_driver_runs_as_kubelet_plugin_in_kubelet_folders() -> None:
    paths = DriverPaths(Path("/d/test-driver"), Path("/k.conf"), Path("/run/n/kubelet"), Path("/c"))
    argv = driver_argv(paths, "real-node", 4)
    assert argv[:4] == [
        "/d/test-driver",
        "--kubeconfig=/k.conf",
        f"--drivername={DRIVER_NAME}",
        "kubelet-plugin",
    ]
    assert "--plugin-registration-path=/run/n/kubelet/plugins_registry" in argv
    assert "--datadir=/run/n/kubelet/plugins" in argv
    assert {"--cdi-dir=/c", "--node-name=real-node", "--num-devices=4"} <= set(argv)
    manifest = device_class_manifest()
    assert manifest["metadata"] == {"name": DEVICE_CLASS}
    (selector,) = manifest["spec"]["selectors"]  # type: ignore[index]
    assert selector["cel"]["expression"] == f'device.driver == "{DRIVER_NAME}"'


def test_claim_env_name_is_the_drivers_variable() -> None:
    assert claim_env_name("pod-a-gpus-x7k2q", "gpus") == "claim_pod_a_gpus_x7k2q_gpus"
    assert claim_env_name("c.1", "req/sub-1") == "claim_c_1_req"


def _checkpoint(states: list[dict[str, Any]]) -> str:
    data = json.dumps({"kind": "DRACheckpoint", "ClaimInfoStateList": states})
    return json.dumps({"Data": data, "Checksum": 1})


def test_prepared_devices_reads_kubelets_dra_checkpoint() -> None:
    state = {
        "ClaimUID": "u1",
        "ClaimName": "c",
        "Namespace": "ns",
        "PodUIDs": {"p": {}},
        "DriverState": {
            DRIVER_NAME: {
                "Devices": [
                    {
                        "PoolName": "real-node",
                        "DeviceName": "device-01",
                        "RequestNames": ["gpus"],
                        "CDIDeviceIDs": [f"{DRIVER_NAME}/test=claim-u1-gpus"],
                    },
                    {"PoolName": "real-node", "DeviceName": "device-03", "RequestNames": None},
                ]
            }
        },
    }
    devices = prepared_devices(_checkpoint([state]))
    assert devices == [
        PreparedDevice(
            "ns",
            "c",
            DRIVER_NAME,
            "real-node",
            "device-01",
            ("gpus",),
            (f"{DRIVER_NAME}/test=claim-u1-gpus",),
        ),
        PreparedDevice("ns", "c", DRIVER_NAME, "real-node", "device-03", (), ()),
    ]
    assert prepared_devices(_checkpoint([])) == []
    with pytest.raises(ValueError, match="not a DRA checkpoint"):
        prepared_devices(_checkpoint([{"ClaimName": "c", "DriverState": {"d": {"Devices": [{}]}}}]))
    with pytest.raises(ValueError):
        prepared_devices("{not json")
