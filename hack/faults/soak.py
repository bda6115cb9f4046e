"""The long fault soak: every fault family in sequence on a fresh local cluster, then a table.

    python -m hack.faults.soak --pods 2000 --kills 10 --seed 1

`--pods` is shared among the seven churn families (API resets, scheduler SIGKILL, leader SIGKILL,
leader SIGSTOP, sole leader SIGSTOP mid-bind, API server restart, 410 Gone); the sole-leader
freeze with DRA pods takes a churn family's share too; the other DRA families
(`hack.faults.dra_faults`: claim writes under API resets, Binding refused after the claim
writes, claim deleted in flight, ResourceSlice republished) a quarter of it each (at least 12),
on one 8-GPU DRA node; the reclaim families (Prometheus faults, victim deleted mid-eviction) and
the node deletion use a handful of pods each. `--families dra` runs the DRA families only:

    python -m hack.faults.soak --families dra --pods 2000 --seed 1

`--kills` is the number of scheduler SIGKILLs; the other injections scale from it. The
table lists per family: the faults injected, the pods created, and the invariant violations
found (0 is the goal). Exit status 1 when any invariant broke, 2 when a scenario itself
failed. Logs stay in `--work-dir`.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

from kubernetes_asyncio import client, config

from hack.faults import dra_faults, dra_scenarios, scenarios
from hack.faults.scenarios import Outcome, Scene
from hack.localcluster import ClusterConfig, LocalCluster

Runner = Callable[[Scene], Awaitable[Outcome]]
FAMILIES = (
    "resets",
    "sigkill",
    "leader-kill",
    "leader-stop",
    "sole-stop",
    "apiserver",
    "gone",
    "prometheus",
    "victim",
    "stale-plan",
    "pdb",
    "node",
    "dra-resets",
    "dra-refused",
    "dra-deleted",
    "dra-slices",
    "dra-sole-stop",
)
DRA_FAMILIES = tuple(f for f in FAMILIES if f.startswith("dra-"))


def plan(pods: int, kills: int) -> dict[str, Runner]:
    """Each family's scenario with its share of pods and injections."""
    share = max(pods // 7, 10)
    some = max(1, kills // 5)
    dra = max(share // 4, 12)  # one 8-GPU node, at most six pods alive at once
    return {
        "resets": lambda s: scenarios.api_resets(s, share, seconds=max(12.0, share / 8)),
        "sigkill": lambda s: scenarios.scheduler_kills(s, share, kills=kills),
        "leader-kill": lambda s: scenarios.leader_kills(s, share, kills=max(2, kills // 3)),
        "leader-stop": lambda s: scenarios.leader_pause(s, share, pauses=some),
        "sole-stop": lambda s: scenarios.sole_leader_freeze(s, share, rounds=max(3, some)),
        "apiserver": lambda s: scenarios.apiserver_restarts(s, share, restarts=some),
        "gone": lambda s: scenarios.watch_gone(s, share, times=some),
        "prometheus": scenarios.prometheus_faults,
        "victim": scenarios.victim_deleted,
        "stale-plan": scenarios.stale_plan,
        "pdb": scenarios.pdb_guarded,
        "node": lambda s: scenarios.node_deleted(s, 6),
        "dra-resets": lambda s: dra_faults.claim_writes_reset_dra(
            s, dra, seconds=max(10.0, dra / 4)
        ),
        "dra-refused": lambda s: dra_faults.binding_refused_dra(s, dra, hold_s=max(10.0, dra / 4)),
        "dra-deleted": lambda s: dra_faults.claim_deleted_in_flight(s, dra),
        "dra-slices": lambda s: dra_faults.slice_republished_dra(s, dra, times=max(6, dra // 4)),
        "dra-sole-stop": lambda s: dra_scenarios.sole_leader_freeze_dra(
            s, share, rounds=max(3, some)
        ),
    }


async def make_namespace(core: client.CoreV1Api, name: str) -> None:
    """Create the namespace and wait for its `default` ServiceAccount; after API server restarts
    the controller manager can be slow to make it, so past 20 s it is created here."""
    await core.create_namespace(cast(Any, {"metadata": {"name": name}}))

    async def default_sa() -> bool:
        accounts = await core.list_namespaced_service_account(name)
        return any(sa.metadata.name == "default" for sa in accounts.items)

    try:
        await scenarios.eventually(default_sa, 20, f"ServiceAccount {name}/default")
    except TimeoutError:
        print(f"ServiceAccount {name}/default late: created by the soak", flush=True)
        body = {"metadata": {"name": "default"}}
        try:
            await core.create_namespaced_service_account(name, cast(Any, body))
        except client.ApiException as error:
            if error.status != 409:  # made by the controller meanwhile
                raise


def table(rows: list[tuple[str, Outcome | None, str]]) -> str:
    """Fixed-width table: fault, injected, pods, violations, what broke."""
    header = f"{'fault':<38} {'injected':>8} {'pods':>6} {'violations':>10}  detail"
    lines = [header, "-" * len(header)]
    for family, outcome, error in rows:
        if outcome is None:
            failed = f"({family}: scenario failed)"
            lines.append(f"{failed:<38} {'-':>8} {'-':>6} {'-':>10}  {error[:80]}")
            continue
        kinds = Counter(v.invariant for v in outcome.violations)
        detail = ", ".join(f"{k} x{n}" for k, n in sorted(kinds.items())) or "-"
        lines.append(
            f"{outcome.fault:<38} {outcome.injected:>8} {outcome.pods:>6} "
            f"{len(outcome.violations):>10}  {detail}"
        )
    return "\n".join(lines)


async def soak(args: argparse.Namespace, work_dir: Path) -> int:
    chosen = [f for f in args.families.split(",") if f] if args.families else list(FAMILIES)
    if chosen == ["dra"]:
        chosen = list(DRA_FAMILIES)
    unknown = set(chosen) - set(FAMILIES)
    if unknown:
        print(f"unknown families {sorted(unknown)}; known: {', '.join(FAMILIES)}", file=sys.stderr)
        return 2
    runners = plan(args.pods, args.kills)
    cluster = LocalCluster(ClusterConfig(work_dir=work_dir / "cluster", kube_scheduler=False))
    await asyncio.to_thread(cluster.start)
    rows: list[tuple[str, Outcome | None, str]] = []
    try:
        configuration = client.Configuration()
        await config.load_kube_config(
            config_file=str(cluster.kubeconfig), client_configuration=configuration
        )
        async with client.ApiClient(configuration) as api:
            core = client.CoreV1Api(api)
            for index, family in enumerate(chosen):
                namespace = f"soak-{family}-{args.seed}"
                folder = work_dir / family
                folder.mkdir(parents=True, exist_ok=True)
                await make_namespace(core, namespace)
                scene = Scene(cluster, api, namespace, folder, args.seed * 100 + index)
                started = time.monotonic()
                try:
                    outcome = await runners[family](scene)
                    rows.append((family, outcome, ""))
                except Exception as error:  # report and go on with the next family
                    traceback.print_exc()
                    rows.append((family, None, f"{type(error).__name__}: {error}"))
                finally:
                    try:
                        await scene.cleanup()
                        await core.delete_namespace(namespace)
                    except Exception as error:  # the next family's checks would be muddied
                        print(f"[{family}] cleanup failed: {error!r}", flush=True)
                print(
                    f"[{family}] done in {time.monotonic() - started:.0f} s; logs in {folder}",
                    flush=True,
                )
                for violation in (rows[-1][1].violations if rows[-1][1] else [])[:10]:
                    print(f"  {violation}", flush=True)
    finally:
        await asyncio.to_thread(cluster.stop)
    print()
    print(table(rows))
    if any(outcome is None for _, outcome, _ in rows):
        return 2
    return 1 if any(outcome and outcome.violations for _, outcome, _ in rows) else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hack.faults.soak", description=__doc__)
    parser.add_argument("--pods", type=int, default=2000, help="pods over the churn families")
    parser.add_argument("--kills", type=int, default=10, help="scheduler SIGKILLs")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--families",
        default="",
        help=f"comma-separated subset of {FAMILIES}, or `dra` for the DRA families",
    )
    parser.add_argument("--work-dir", type=Path, default=None, help="logs and cluster data")
    args = parser.parse_args(argv)
    if args.pods < 1 or args.kills < 1:
        parser.error("--pods and --kills must be positive")
    work_dir = args.work_dir or Path(tempfile.mkdtemp(prefix="gpu-scheduler-soak-"))
    print(f"soak: {args.pods} pods, {args.kills} kills, seed {args.seed}; work dir {work_dir}")
    return asyncio.run(soak(args, work_dir))


if __name__ == "__main__":
    sys.exit(main())
