"""Start the local cluster and keep it up until interrupted (Ctrl-C or SIGTERM).

    python -m hack.localcluster                 # the kwok-only cluster, as the tests use it
    python -m hack.localcluster --real-node     # plus a real node (root; see realnode.py)

Prints the kubeconfig to use, how long each part took to start, and, on exit, that everything
stopped.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from hack.localcluster.cluster import ClusterConfig, LocalCluster
from hack.localcluster.processes import ComponentError


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m hack.localcluster", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--real-node",
        action="store_true",
        help="also run a real node: containerd, kubelet and kube-proxy on this machine (root)",
    )
    parser.add_argument(
        "--work-dir", type=Path, default=None, help="cluster folder (default: a temporary one)"
    )
    parser.add_argument(
        "--no-kube-scheduler", action="store_true", help="do not run the baseline kube-scheduler"
    )
    parser.add_argument(
        "--no-prometheus",
        action="store_true",
        help="run neither Prometheus nor the fake dcgm-exporter",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    cluster = LocalCluster(
        ClusterConfig(
            work_dir=args.work_dir,
            real_node=args.real_node,
            kube_scheduler=not args.no_kube_scheduler,
            prometheus=not args.no_prometheus,
            fake_dcgm=not args.no_prometheus,
        )
    )
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    try:
        cluster.start()
    except (ComponentError, FileNotFoundError) as error:
        print(f"the local cluster did not start: {error}", file=sys.stderr)
        return 1
    try:
        print(f"local cluster up in {cluster.started_in_s:.1f} s; logs in {cluster.log_dir}")
        if cluster.real_node is not None:
            steps = ", ".join(f"{k} {v:.1f} s" for k, v in cluster.real_node.timings.items())
            print(f"real node {cluster.real_node.name} Ready ({steps})")
        print(f"export KUBECONFIG={cluster.kubeconfig}")
        print("Ctrl-C stops it", flush=True)
        stop.wait()
    finally:
        cluster.stop()
        print("stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
