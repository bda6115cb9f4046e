"""Putting the host back after a real node (`realnode.RealNode`): what its teardown, or the next
start after a launcher that died without one, removes and restores.

`HostRecord` is what a running node keeps in its lock file: its folders, the sysctls and nftables
tables as they were before it started, and the fixed folders that did not exist then.
`clean_host(record, kube_proxy)`, once kubelet, kube-proxy, the DRA driver and containerd are
stopped, removes kube-proxy's and kubelet's iptables rules, kills what is left in the node's
cgroups (`CGROUP_NAME`) and containerd's shims, unmounts what is mounted under its folders,
deletes the bridge, the cgroups and CNI's and kubelet's files in fixed folders, the socket folder,
and restores the sysctls. Every step ignores what is already gone, so it can run more than once.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from hack.localcluster import hoststate
from hack.localcluster.containerd import BRIDGE, CNI_NETWORK

CGROUP_NAME = "gpu-scheduler-real-node"
CONTAINER_LOG_LINKS = Path("/var/log/containers")
CNI_STATE = Path("/var/lib/cni")


def _output(argv: list[str]) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=False).stdout


@dataclass(frozen=True)
class HostRecord:
    """What teardown needs to put the host back: the node's folders, the sysctls and nftables
    tables as they were before the start, and the fixed folders that did not exist then."""

    folder: Path
    socket_dir: Path | None = None
    sysctls: dict[str, str] = field(default_factory=dict)
    nft_tables: frozenset[str] = frozenset()
    created_paths: tuple[Path, ...] = ()

    @classmethod
    def now(cls, folder: Path, socket_dir: Path) -> HostRecord:
        """The host as it is before a start."""
        sysctls = {}
        for name in hoststate.SYSCTLS:
            path = Path("/proc/sys") / name
            if path.is_file():
                sysctls[name] = path.read_text().strip()
        created = tuple(
            Path(watched)
            for watched in (*hoststate.WATCHED_PATHS, "/run/containerd/s")
            if not Path(watched).exists()
        )
        return cls(folder, socket_dir, sysctls, frozenset(nft_tables()), created)

    def to_json(self) -> str:
        """One JSON line; empty for a record with nothing to clean (no socket folder)."""
        if self.socket_dir is None:
            return ""
        return json.dumps(
            {
                "folder": str(self.folder),
                "socket_dir": str(self.socket_dir),
                "sysctls": self.sysctls,
                "nft_tables": sorted(self.nft_tables),
                "created_paths": [str(p) for p in self.created_paths],
            }
        )

    @classmethod
    def from_json(cls, text: str) -> HostRecord | None:
        """The record in `text`, or None when it is empty or not a record."""
        try:
            data = json.loads(text)
            return cls(
                folder=Path(data["folder"]),
                socket_dir=Path(data["socket_dir"]),
                sysctls={str(k): str(v) for k, v in data["sysctls"].items()},
                nft_tables=frozenset(map(str, data["nft_tables"])),
                created_paths=tuple(Path(p) for p in data["created_paths"]),
            )
        except (ValueError, KeyError, TypeError, AttributeError):
            return None


def clean_host(record: HostRecord, kube_proxy: Path | None) -> None:
    """Put the host back as `record` says it was, once kubelet, kube-proxy and containerd are
    stopped: kube-proxy's and kubelet's iptables rules, processes left in the node's cgroups and
    containerd's shims, mounts under its folders, the bridge, the cgroups, CNI's and kubelet's
    files in fixed folders, the socket folder, the sysctls."""
    if kube_proxy is not None and kube_proxy.is_file():
        subprocess.run([str(kube_proxy), "--cleanup", "--v=0"], capture_output=True, check=False)
    remove_kube_iptables(set(record.nft_tables))
    folders = [record.folder] + ([record.socket_dir] if record.socket_dir else [])
    _kill_leftovers(folders)
    _unmount(folders)
    subprocess.run(["ip", "link", "delete", BRIDGE], capture_output=True, check=False)
    _remove_cgroups()
    _remove_host_files(record)
    if record.socket_dir is not None:
        shutil.rmtree(record.socket_dir, ignore_errors=True)
    _restore_sysctls(record.sysctls)


def _kill_leftovers(folders: list[Path]) -> None:
    """SIGKILL every process that names one of `folders` (containerd's shims name its socket)
    and every process left in the node's cgroups."""
    pids = {
        int(line.split()[0])
        for folder in folders
        for line in hoststate.processes_mentioning(str(folder))
    }
    for cgroup in hoststate.cgroups_named(CGROUP_NAME):
        try:
            pids.update(int(p) for p in Path(cgroup, "cgroup.procs").read_text().split())
        except OSError:
            continue
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue


def _unmount(folders: list[Path]) -> None:
    for _ in range(3):
        points = [point for folder in folders for point in hoststate.mounts_under(folder)]
        if not points:
            return
        for point in sorted(points, key=len, reverse=True):
            subprocess.run(["umount", "-l", point], capture_output=True, check=False)


def _remove_cgroups() -> None:
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline:
        remaining = hoststate.cgroups_named(CGROUP_NAME)
        if not remaining:
            return
        for cgroup in sorted(remaining, key=len, reverse=True):
            try:
                os.rmdir(cgroup)
            except OSError:
                continue
        time.sleep(0.2)


def _remove_host_files(record: HostRecord) -> None:
    """CNI's result cache and kubelet's log links live in fixed folders: remove this node's
    entries, and the folders themselves when they did not exist before the start."""
    for result in (CNI_STATE / "results").glob(f"{CNI_NETWORK}-*"):
        result.unlink(missing_ok=True)
    if CONTAINER_LOG_LINKS.is_dir():
        for link in CONTAINER_LOG_LINKS.iterdir():
            if link.is_symlink() and os.readlink(link).startswith(str(record.folder)):
                link.unlink()
    for path in sorted(record.created_paths, key=lambda p: len(str(p)), reverse=True):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)


def _restore_sysctls(sysctls: dict[str, str]) -> None:
    for name, value in sysctls.items():
        path = Path("/proc/sys") / name
        try:
            if path.read_text().strip() != value:
                path.write_text(value)
        except OSError:
            continue


def nft_tables() -> set[str]:
    """The nftables tables ("ip filter", "ip6 nat", ...) that exist now; empty without `nft`."""
    if shutil.which("nft") is None:
        return set()
    lines = _output(["nft", "list", "tables"]).splitlines()
    return {line.removeprefix("table ").strip() for line in lines if line.startswith("table ")}


def remove_kube_iptables(tables_before: set[str]) -> None:
    """Remove what kubelet and kube-proxy leave in iptables after `kube-proxy --cleanup`: kubelet's
    chains (KUBE-FIREWALL, KUBE-KUBELET-CANARY, KUBE-IPTABLES-HINT, ...) and the rules that jump
    to any KUBE-* chain, for IPv4 and IPv6; then the nftables tables that iptables created and
    that hold nothing but empty built-in chains, unless they existed before (`tables_before`)."""
    for family in ("iptables", "ip6tables"):
        if shutil.which(f"{family}-save") is None:
            continue
        table = ""
        chains: dict[str, list[str]] = {}
        for line in _output([f"{family}-save"]).splitlines():
            if line.startswith("*"):
                table = line[1:]
                chains[table] = []
            elif line.startswith(":KUBE-"):
                chains[table].append(line[1:].split()[0])
            elif line.startswith("-A ") and "KUBE-" in line:
                rule = shlex.split(line)
                if not rule[1].startswith("KUBE-"):  # rules inside KUBE-* chains go with them
                    _output([family, "-w", "-t", table, "-D", *rule[1:]])
        for table, names in chains.items():
            for name in names:
                _output([family, "-w", "-t", table, "-F", name])
            for name in names:
                _output([family, "-w", "-t", table, "-X", name])
    if shutil.which("nft") is None:
        return
    for table in sorted(nft_tables() - tables_before):
        listing = _output(["nft", "list", "table", *table.split()])
        if not re.search(r"^\s*(?!type |policy |chain |table |})\S", listing, re.MULTILINE):
            _output(["nft", "delete", "table", *table.split()])
