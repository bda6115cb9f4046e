"""`python -m hack.differential`: run the differential test and print the agreement table."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

from kubernetes_asyncio import client, config

from hack.differential.compare import Outcome, render, summarize
from hack.differential.dra_generate import DRA_FEATURES, generate_dra
from hack.differential.dra_run import compare_dra_pods, install_dra
from hack.differential.generate import FEATURES, generate
from hack.differential.reference import start_reference
from hack.differential.run import compare_pods, install
from hack.localcluster import ClusterConfig, LocalCluster
from hack.localcluster.processes import ComponentError
from scheduler.kube.apierrors import APIError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m hack.differential", description=__doc__)
    parser.add_argument("--nodes", type=int, default=300)
    parser.add_argument("--pods", type=int, default=500)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--work-dir", type=Path, help="cluster folder (default: a fresh temp dir)")
    parser.add_argument("--verbose", action="store_true", help="print every pod's verdict")
    parser.add_argument(
        "--dra",
        action="store_true",
        help="DRA scenarios instead: GPUs published as ResourceSlices, pods with ResourceClaims",
    )
    return parser


async def _main(cluster: LocalCluster, args: argparse.Namespace) -> list[Outcome]:
    configuration = client.Configuration()
    await config.load_kube_config(
        config_file=str(cluster.kubeconfig), client_configuration=configuration
    )

    def progress(index: int, outcome: Outcome) -> None:
        if args.verbose or outcome.verdict == "disagree":
            print(f"[{index + 1}/{args.pods}] {outcome.verdict}: {outcome.describe()}", flush=True)
        elif (index + 1) % 50 == 0:
            print(f"[{index + 1}/{args.pods}]", flush=True)

    async with client.ApiClient(configuration) as api:
        core = client.CoreV1Api(api)
        started = time.monotonic()
        if args.dra:
            dra = generate_dra(args.seed, args.nodes, args.pods)
            await install_dra(core, dra)
            counts = f"{len(dra.nodes)} DRA nodes, {len(dra.existing)} existing pods with claims"
        else:
            scenario = generate(args.seed, args.nodes, args.pods)
            await install(core, scenario)
            counts = f"{len(scenario.nodes)} nodes, {len(scenario.existing)} existing pods"
        print(f"installed {counts} in {time.monotonic() - started:.0f} s", flush=True)
        reference = start_reference(cluster)
        try:
            if args.dra:
                return await compare_dra_pods(core, reference, dra, progress)
            return await compare_pods(core, reference, scenario.candidates, progress)
        finally:
            reference.stop()


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.nodes < 1 or args.pods < 1:
        parser.error("--nodes and --pods must be at least 1")
    started = time.monotonic()
    cluster = LocalCluster(
        ClusterConfig(
            work_dir=args.work_dir, kube_scheduler=False, prometheus=False, fake_dcgm=False
        )
    )
    try:
        with cluster:
            print(f"cluster up in {cluster.started_in_s:.0f} s; logs in {cluster.log_dir}")
            outcomes = asyncio.run(_main(cluster, args))
    except (ComponentError, APIError, client.ApiException, RuntimeError, TimeoutError) as error:
        print(f"python -m hack.differential: {str(error)[:2000]}", file=sys.stderr)
        return 2
    rows = summarize(outcomes, DRA_FEATURES if args.dra else FEATURES)
    sizes = [len(o.kube) for o in outcomes]
    print(
        f"\nkube-scheduler's feasible sets: {sizes.count(0)} empty, {sizes.count(1)} of one node, "
        f"{sum(s >= 2 for s in sizes)} larger (median {sorted(sizes)[len(sizes) // 2]} nodes); "
        f"{sum(o.attempts > 1 for o in outcomes)} pods judged again after a state change"
    )
    print(render(rows))
    disagreements = [o for o in outcomes if o.verdict == "disagree"]
    justified = [o for o in outcomes if o.verdict == "justified"]
    for title, group in (
        ("justified (NVLink policy)", justified),
        ("disagreements", disagreements),
    ):
        if group:
            print(f"\n{title}:")
            for outcome in group:
                print(outcome.describe())
    flag = " --dra" if args.dra else ""
    print(
        f"\n--nodes {args.nodes} --pods {args.pods} --seed {args.seed}{flag}: "
        f"{rows[-1].agreement:.1f} % agreement in {time.monotonic() - started:.0f} s"
    )
    return 1 if disagreements else 0


if __name__ == "__main__":
    sys.exit(main())
