"""A snapshot of the host-wide state that a real node touches, to check that its teardown left
nothing behind.

A kubelet, containerd, CNI plugins and kube-proxy change things outside their own folders: network
links (a bridge, veths), iptables rules, mounts, cgroups, a few sysctls, files under /var/lib/cni,
/run/containerd and /var/log/containers, and processes (containerd's shims outlive containerd).
`snapshot(folder, cgroup_name)` records each of those; `differences(before, after)` lists, one
line each, what changed. Other processes of the machine may change the same things, so compare
snapshots taken close together, on a machine that runs one real node at a time.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, fields
from pathlib import Path

SYSCTLS = (
    "net/ipv4/ip_forward",
    "net/ipv4/conf/all/route_localnet",
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
)
"""The sysctls that kubelet (its kernel defaults), kube-proxy and the bridge CNI plugin write."""
WATCHED_PATHS = (
    "/var/lib/cni",
    "/run/containerd",
    "/var/run/netns",
    "/var/log/pods",
    "/var/log/containers",
    "/var/lib/kubelet",
    "/etc/cni",
)
"""Default folders of kubelet, containerd and CNI that the real node must not leave behind."""
WATCHED_GLOBS = ("/run/gpus-node-*",)
"""The real node's own host-wide paths (its containerd socket folder)."""
SHIM = "containerd-shim"
"""containerd's shims outlive containerd and name its socket, not the node's folder."""
CGROUP_ROOT = Path("/sys/fs/cgroup")
_COUNTERS = re.compile(r"\[\d+:\d+\]")


@dataclass(frozen=True)
class HostState:
    """What `snapshot` saw; every field is a sorted tuple of lines."""

    processes: tuple[str, ...]
    mounts: tuple[str, ...]
    links: tuple[str, ...]
    iptables: tuple[str, ...]
    cgroups: tuple[str, ...]
    sysctls: tuple[str, ...]
    paths: tuple[str, ...]


def _run(argv: list[str]) -> str:
    if shutil.which(argv[0]) is None:
        return ""
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    return result.stdout


def processes_mentioning(text: str) -> list[str]:
    """`<pid> <command line>` of every process whose command line contains `text`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        line = " ".join(a.decode(errors="replace") for a in argv if a)
        if text in line:
            found.append(f"{entry.name} {line[:200]}")
    return found


def mounts_under(folder: Path) -> list[str]:
    """Mount points at or below `folder`, deepest first."""
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split(" ")[4].replace("\\040", " ")
        if point == str(folder) or point.startswith(f"{folder}/"):
            points.append(point)
    return sorted(points, key=len, reverse=True)


def cgroups_named(name: str) -> list[str]:
    """Every cgroup folder `<hierarchy>/<name>` and below, on each mounted hierarchy."""
    found: list[str] = []
    if not CGROUP_ROOT.is_dir():
        return found
    for hierarchy in sorted(CGROUP_ROOT.iterdir()):
        top = hierarchy / name
        if top.is_dir():
            found.extend(str(path) for path, _, _ in os.walk(top))
    return found


def _paths() -> list[str]:
    found = [str(p) for p in _own_paths()]
    for watched in WATCHED_PATHS:
        path = Path(watched)
        if path.exists() or path.is_symlink():
            found.append(watched)
            if path.is_dir():
                found.extend(str(p) for p in sorted(path.rglob("*"))[:200])
    return found


def _own_paths() -> list[Path]:
    return [p for pattern in WATCHED_GLOBS for p in Path("/").glob(pattern.lstrip("/"))]


def _sysctls() -> list[str]:
    values = []
    for name in SYSCTLS:
        try:
            values.append(f"{name}={(Path('/proc/sys') / name).read_text().strip()}")
        except OSError:
            continue
    return values


def _iptables() -> list[str]:
    lines = []
    for tool in ("iptables-save", "ip6tables-save"):
        for line in _run([tool]).splitlines():
            if line.startswith("#"):
                continue
            lines.append(f"{tool}: {_COUNTERS.sub('', line).rstrip()}")
    return lines


def _links() -> list[str]:
    links = []
    for line in _run(["ip", "-o", "link", "show"]).splitlines():
        parts = line.split(":", 2)
        if len(parts) >= 2:
            links.append(parts[1].strip().split("@")[0])
    return links


def snapshot(folder: Path, cgroup_name: str) -> HostState:
    """The host-wide state as it is now; `folder` is the real node's own folder (its processes
    and mounts are those that name or lie under it), `cgroup_name` its cgroup root's name."""
    return HostState(
        processes=tuple(sorted(processes_mentioning(str(folder)) + processes_mentioning(SHIM))),
        mounts=tuple(
            sorted(mounts_under(folder) + [m for p in _own_paths() for m in mounts_under(p)])
        ),
        links=tuple(sorted(_links())),
        iptables=tuple(sorted(_iptables())),
        cgroups=tuple(sorted(cgroups_named(cgroup_name))),
        sysctls=tuple(sorted(_sysctls())),
        paths=tuple(sorted(_paths())),
    )


def differences(before: HostState, after: HostState, limit: int = 40) -> list[str]:
    """`+ <field>: <line>` for each line only in `after`, `- ...` for each only in `before`; at
    most `limit` lines."""
    lines: list[str] = []
    for field in fields(HostState):
        old, new = set(getattr(before, field.name)), set(getattr(after, field.name))
        lines.extend(f"+ {field.name}: {line}" for line in sorted(new - old))
        lines.extend(f"- {field.name}: {line}" for line in sorted(old - new))
    return lines[:limit]
