"""The real node's pure parts: the OCI image writer, the generated configs, the host-state diff,
and `build-binaries.sh --node` (against the stand-in `go` of test_build_binaries_output)."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest

from hack.localcluster import hoststate
from hack.localcluster.oci import (
    CONTAINERD_NAME_ANNOTATION,
    LAYER_MEDIA_TYPE,
    ImageFile,
    goarch,
    write_image_archive,
)
from hack.localcluster.realnode import (
    BRIDGE,
    CGROUP_NAME,
    PAUSE_IMAGE,
    HostRecord,
    NodeBinaries,
    cni_config,
    containerd_config,
    kube_proxy_config,
    kubelet_config,
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


BINARIES = NodeBinaries(
    kubelet=Path("kubelet"),
    kube_proxy=Path("kube-proxy"),
    pause=Path("pause"),
    probe=Path("probe"),
    containerd=Path("/usr/bin/containerd"),
    ctr=Path("/usr/bin/ctr"),
    runc=Path("/usr/sbin/runc"),
    cni_bin_dir=Path("/usr/lib/cni"),
)


def test_containerd_config_keeps_state_in_its_folder_and_restricts_oom_when_asked() -> None:
    folder, socket = Path("/w/node/containerd"), Path("/run/gpus-node-1/containerd.sock")
    restricted = containerd_config(folder, socket, Path("/w/cni"), BINARIES, restrict_oom=True)
    assert "restrict_oom_score_adj = true" in restricted
    assert f'sandbox_image = "{PAUSE_IMAGE}"' in restricted
    assert f'root = "{folder}/root"' in restricted and f'address = "{socket}"' in restricted
    assert "SystemdCgroup = false" in restricted
    free = containerd_config(folder, socket, Path("/w/cni"), BINARIES, restrict_oom=False)
    assert "restrict_oom_score_adj = false" in free


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
    (bridge,) = config["plugins"]  # type: ignore[misc]
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
    # The control plane was cached by the first run: only the node's parts were built.
    assert node.stderr.count(" built in ") == 2, node.stderr


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
