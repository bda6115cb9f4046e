"""kube-scheduler as the reference: a dedicated instance whose log names every feasible node.

How the feasible set is read (kube-scheduler v1.37, pkg/scheduler/schedule_one.go):
- `schedulePod` runs the filters over all nodes (`percentageOfNodesToScore: 100` makes
  `numFeasibleNodesToFind` the node count, so the search never stops early);
- zero feasible nodes: a FitError, so the pod gets `PodScheduled=False`, reason Unschedulable;
- exactly one: "When only one node after predicate, just use it": no scoring, the pod is bound
  to that node;
- two or more: `prioritizeNodes` logs, at V(10), "Calculated node's final score for pod" once
  per feasible node (the `node` key), then the pod is bound to one of them.
So the feasible set is the logged nodes, or {spec.nodeName} when none were logged, or {} when
the pod is Unschedulable. That reading needs a full search for every pod: the OpportunisticBatching
feature gate (KEP-5598, beta and on by default since 1.35) lets a pod whose scheduling signature
matches the previous pod's take the next node of that pod's ranking with no filters run
("evaluatedNodes=1 feasibleNodes=1"), so the reference runs with it off, and
`run.check_counts` still marks any bound pod whose logged `evaluatedNodes` is short of the node
count. The instance runs with its own schedulerName, DefaultPreemption off
(a pod that fits nowhere must not evict the fixed existing pods), PodTopologySpread's cluster
defaults off (`defaultingType: List`, `defaultConstraints: []`: gpu-scheduler does not apply
them), and V(10) only for schedule_one.go (`--vmodule`), which keeps client-go's request logging
quiet.
"""

from __future__ import annotations

import re
import ssl
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import yaml

from hack.localcluster import LocalCluster
from hack.localcluster.cluster import READY_TIMEOUT_S, free_port
from hack.localcluster.processes import Component

SCHEDULER_NAME = "differential-reference"
SCORED = re.compile(r'"Calculated node\'s final score for pod" pod="([^"]+)" node="([^"]+)"')
BOUND = re.compile(
    r'"Successfully bound pod to node" pod="([^"]+)" node="([^"]+)" '
    r"evaluatedNodes=(\d+) feasibleNodes=(\d+)"
)


def config(kubeconfig: Path) -> dict[str, object]:
    """The KubeSchedulerConfiguration of the reference instance (see the module docstring)."""
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig), "qps": 200, "burst": 400},
        "leaderElection": {"leaderElect": False},
        "percentageOfNodesToScore": 100,
        "profiles": [
            {
                "schedulerName": SCHEDULER_NAME,
                "percentageOfNodesToScore": 100,
                "plugins": {"postFilter": {"disabled": [{"name": "DefaultPreemption"}]}},
                "pluginConfig": [
                    {
                        "name": "PodTopologySpread",
                        "args": {"defaultingType": "List", "defaultConstraints": []},
                    }
                ],
            }
        ],
    }


def parse_scored(text: str) -> dict[str, set[str]]:
    """Pod key ("namespace/name") -> nodes the log says were scored for it."""
    scored: dict[str, set[str]] = {}
    for match in SCORED.finditer(text):
        scored.setdefault(match.group(1), set()).add(match.group(2))
    return scored


@dataclass(frozen=True)
class BoundCounts:
    """The counts kube-scheduler logged (V(2)) when it bound one pod."""

    evaluated: int
    feasible: int


def parse_bound(text: str) -> dict[str, BoundCounts]:
    """Pod key -> the node counts kube-scheduler logged when it (last) bound the pod."""
    return {m.group(1): BoundCounts(int(m.group(3)), int(m.group(4))) for m in BOUND.finditer(text)}


def arguments(
    binary: Path, config_path: Path, kubeconfig: Path, port: int, cert_dir: Path
) -> list[str]:
    """The reference instance's command line (see the module docstring for the choices)."""
    return [
        str(binary),
        f"--config={config_path}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--cert-dir={cert_dir}",
        "--feature-gates=OpportunisticBatching=false",
        "--v=2",
        "--vmodule=schedule_one=10",
    ]


@dataclass
class ReferenceScheduler:
    """A running reference kube-scheduler; `stop()` ends it."""

    component: Component
    offset: int = 0

    def read_new(self) -> str:
        """Log text written since the previous call."""
        with self.component.log_path.open("rb") as log:
            log.seek(self.offset)
            data = log.read()
        # Keep a partial last line for the next call.
        cut = data.rfind(b"\n") + 1
        self.offset += cut
        return data[:cut].decode(errors="replace")

    def whole_log(self) -> str:
        return self.component.log_path.read_text(errors="replace")

    def stop(self) -> None:
        self.component.stop()

    def alive(self) -> bool:
        return self.component.alive()


def start_reference(
    cluster: LocalCluster, name: str = "kube-scheduler-reference"
) -> ReferenceScheduler:
    """Start the reference kube-scheduler against `cluster` and wait until it is healthy.

    Raises ComponentError (from the cluster's process group) when it does not come up."""
    assert cluster.binaries is not None, "start the cluster first"
    path = cluster.work_dir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config(cluster.kubeconfig)))
    port = free_port()
    argv = arguments(
        cluster.binaries.kube_scheduler,
        path,
        cluster.kubeconfig,
        port,
        cluster.work_dir / f"{name}-certs",
    )
    component = cluster.processes.start(name, argv)
    insecure = ssl._create_unverified_context()  # self-signed serving cert, loopback only

    def healthy() -> bool:
        try:
            url = f"https://127.0.0.1:{port}/healthz"
            with urllib.request.urlopen(url, timeout=2, context=insecure) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError, ssl.SSLError):
            return False

    cluster.processes.wait_ready(component, healthy, READY_TIMEOUT_S)
    reference = ReferenceScheduler(component)
    reference.read_new()
    return reference


def version(binary: Path) -> str:
    """`kube-scheduler --version` output, for the report."""
    done = subprocess.run([str(binary), "--version"], capture_output=True, text=True, check=False)
    return done.stdout.strip() or done.stderr.strip()
