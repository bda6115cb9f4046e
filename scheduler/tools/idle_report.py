"""`gpu-scheduler idle-report`: the pods holding GPUs idle over the idle window, and whether reclaim
could take them.

    gpu-scheduler idle-report [--kubeconfig FILE] [--context NAME] [--config FILE]
                              [--prometheus-url URL] [--idle-window SECONDS]
                              [--threshold PERCENT] [-n NAMESPACE] [-o table|wide|json|yaml]

Reads every pod, PriorityClass, Node and ResourceClaim from the API server (the kubeconfig flag
as the other subcommands; default: in-cluster), counts each pod's GPUs as the daemon does (its
nvidia.com/gpu request where the node offers GPUs through the device plugin, plus one per device
of a `dra.gpuDrivers` driver allocated to its claims reserved for it), and sends Prometheus the
same single query as the daemon's GPU time sampler (`reclaim.accounting_query`). A pod is
listed when `reclaim.usage.idle_verdict` finds it idle over the idle window (default
`accounting.idleWindowSeconds` and `accounting.idleUsageThresholdPercent` of `--config`), with
the reclaim policy of its PriorityClass judged by `reclaim.policy.victim_eligibility` for a
preemptor of exactly the policy's minimum-preemptable-priority: either the priority a preemptor
needs, or why no policy applies (none, invalid, within toleration, unknown schedule time).

"Idle for" is a lower bound: the verdict proves idleness over the whole window, not since when.
JSON rows have the keys `namespace`, `pod`, `node`, `gpus`, `usage_pct`, `idle_for_at_least_s`,
`priority_class`, `reclaimable`, `policy` (`-o yaml`: the same as YAML). The report covers
every namespace unless `-n NAMESPACE` names one. Errors (no kubeconfig, API server or Prometheus
unreachable, bad flags) are one line on stderr and exit status 1 (2 for bad configuration).

`--plot FILE.png` also draws the busy share of measured GPU time per namespace over the last
`--plot-window` seconds (default one day), from the daemon's GPU time counters in Prometheus
(`scheduler.tools.busy_share`, drawn by `scheduler.tools.plots.plot_busy_share`); `-n` keeps one
namespace. It needs matplotlib (`gpu-scheduler[plot]`; without it: one line, exit status 2).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from reclaim.accounting import Holder, Measure, PodKey, pod_idle_verdict
from reclaim.accounting_query import measure_holders
from reclaim.policy import PolicyResult, PolicyStatus, VictimFacts, parse_policy, victim_eligibility
from reclaim.prometheus import PrometheusClient, PrometheusQueryFailed
from reclaim.promql import LabelNames
from reclaim.signals import GpuWindow
from scheduler.config import ConfigError, SchedulerConfig, add_config_flags, config_from_args
from scheduler.core.accounting_task import holder_of, measure_of
from scheduler.model.claims import ResourceClaim, parse_resource_claim
from scheduler.model.objects import NodeInfo, PodInfo, parse_node, parse_pod
from scheduler.model.resources import GPU
from scheduler.state.dra import reserved_gpu_devices
from scheduler.state.gpu_holdings import held_gpus
from scheduler.tools.busy_share import DEFAULT_WINDOW_S, NamespaceHistory, read_busy_history
from scheduler.tools.output import add_context_flag, add_output_flag, structured
from scheduler.tools.plots import add_plot_flag, check_plot_target, plot_busy_share

JsonObject = dict[str, Any]
PERIOD_S = 60.0
"""The period part of the shared query is not used here; one minute keeps it cheap."""
MAX_ERROR_CHARS = 300


class ReportError(Exception):
    """A one-line reason the report could not be made."""


@dataclass(frozen=True)
class ClusterView:
    """What the report reads from the API server, as plain JSON."""

    pods: list[JsonObject]
    classes: list[JsonObject]
    nodes: list[JsonObject]
    claims: list[JsonObject]


def holders_of(pods: Iterable[PodInfo], holdings: Mapping[str, int] | None = None) -> list[Holder]:
    """The pods bound to a node, not finished, holding whole GPUs: `holdings` by pod uid (the
    device plugin and DRA together, `report_holdings`), else their nvidia.com/gpu request."""
    found = []
    for pod in pods:
        gpus = pod.gpus if holdings is None else holdings.get(pod.uid, 0)
        if (holder := holder_of(pod, pod.node_name, gpus)) is not None:
            found.append(holder)
    return found


def report_holdings(
    pods: Iterable[PodInfo],
    nodes: Iterable[NodeInfo],
    claims: Iterable[ResourceClaim],
    gpu_drivers: Collection[str],
) -> dict[str, int]:
    """Pod uid -> the whole GPUs it holds (`scheduler.state.gpu_holdings.held_gpus`): its
    nvidia.com/gpu request where its node offers GPUs through the device plugin (or the node is
    not listed), plus its claims' devices of `gpu_drivers`. Pure."""
    device_plugin = {node.name: bool(node.allocatable[GPU]) for node in nodes}
    dra = reserved_gpu_devices(claims, gpu_drivers)
    return {
        pod.uid: held_gpus(pod, device_plugin.get(pod.node_name, True), dra.get(pod.uid, 0))
        for pod in pods
    }


def policy_text(
    holder: Holder, priority: int, policy: PolicyResult, now: float
) -> tuple[bool, str]:
    """(reclaimable, what the policy says) for one idle holder (see the module docstring)."""
    if policy.status is PolicyStatus.VALID and policy.policy is not None:
        minimum = policy.policy.minimum_preemptable_priority
    else:
        minimum = priority
    facts = VictimFacts(
        f"{holder.namespace}/{holder.name}",
        priority,
        holder.priority_class,
        holder.started_at,
        holder.gpus,
    )
    eligibility = victim_eligibility(facts, minimum, policy, now)
    if not eligibility.eligible:
        return False, f"none: {eligibility.message}"
    assert policy.policy is not None
    rule = policy.policy
    return True, (
        f"{holder.priority_class}: reclaimable by priority >= {minimum} "
        f"(policy: idle {rule.resource_idle_seconds} s under "
        f"{rule.resource_idle_usage_threshold:g} %; {eligibility.message})"
    )


def report_rows(
    holders: Sequence[Holder],
    priorities: Mapping[PodKey, int],
    idle_windows: Mapping[PodKey, Sequence[GpuWindow]],
    policies: Mapping[str, PolicyResult],
    measure: Measure,
    now: float,
) -> list[JsonObject]:
    """One row per holder idle over the idle window, sorted by namespace and pod. Pure."""
    rows: list[JsonObject] = []
    for holder in sorted(holders, key=lambda h: h.key):
        verdict = pod_idle_verdict(holder, idle_windows.get(holder.key, []), measure)
        if verdict is None or not verdict.idle:
            continue
        policy = policies.get(holder.priority_class) or PolicyResult(
            holder.priority_class, PolicyStatus.NONE
        )
        reclaimable, text = policy_text(holder, priorities.get(holder.key, 0), policy, now)
        usage = verdict.usage_pct
        rows.append(
            {
                "namespace": holder.namespace,
                "pod": holder.name,
                "node": holder.node,
                "gpus": holder.gpus,
                "usage_pct": None if usage is None else round(usage, 2),
                "idle_for_at_least_s": measure.idle_window_s,
                "priority_class": holder.priority_class,
                "reclaimable": reclaimable,
                "policy": text,
            }
        )
    return rows


def duration_text(seconds: float) -> str:
    """e.g. ">= 1h", ">= 1h30m", ">= 45s"."""
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [
        f"{hours}h" if hours else "",
        f"{minutes}m" if minutes else "",
        f"{secs}s" if secs else "",
    ]
    return ">= " + ("".join(parts) or "0s")


def render_table(rows: Sequence[JsonObject]) -> str:
    header = ["NAMESPACE", "POD", "NODE", "GPUS", "USAGE", "IDLE FOR", "POLICY"]
    lines = [header]
    for row in rows:
        usage = row["usage_pct"]
        lines.append(
            [
                row["namespace"],
                row["pod"],
                row["node"],
                str(row["gpus"]),
                "-" if usage is None else f"{usage:.1f} %",
                duration_text(row["idle_for_at_least_s"]),
                row["policy"],
            ]
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )


def _cut(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= MAX_ERROR_CHARS else flat[:MAX_ERROR_CHARS] + "..."


async def _read_cluster(kubeconfig: Path | None, context: str | None = None) -> ClusterView:
    """Pods, PriorityClasses, Nodes and ResourceClaims as plain JSON (no claims where
    resource.k8s.io/v1 is not served); ReportError for an unusable kubeconfig or an API server
    that does not answer."""
    from kubernetes_asyncio import client
    from kubernetes_asyncio.config import ConfigException

    from scheduler.kube.apierrors import APINotFoundError, expect_success
    from scheduler.kube.client import api_client_for

    where = f"kubeconfig {str(kubeconfig)[:200]}" if kubeconfig else "in-cluster configuration"
    try:
        api_client = await api_client_for(str(kubeconfig) if kubeconfig else None, context)
    except ConfigException as error:
        raise ReportError(f"{where}: {_cut(str(error))} (give --kubeconfig FILE)") from None
    except Exception as error:  # not YAML, wrong shape, unreadable: the file is unusable
        raise ReportError(f"{where}: {_cut(str(error) or type(error).__name__)}") from None
    try:
        async with api_client:
            core = client.CoreV1Api(api_client)
            scheduling = client.SchedulingV1Api(api_client)
            pods = json.loads(
                await expect_success(await core.list_pod_for_all_namespaces(_preload_content=False))
            )
            classes = json.loads(
                await expect_success(await scheduling.list_priority_class(_preload_content=False))
            )
            nodes = json.loads(await expect_success(await core.list_node(_preload_content=False)))
            try:
                resource = client.ResourceV1Api(api_client)
                claims = json.loads(
                    await expect_success(
                        await resource.list_resource_claim_for_all_namespaces(
                            _preload_content=False
                        )
                    )
                )
            except APINotFoundError:  # resource.k8s.io/v1 not served: no DRA GPUs
                claims = {}
    except Exception as error:  # any transport or API failure: one line, no traceback
        text = _cut(str(error) or type(error).__name__)
        raise ReportError(f"cannot read pods from the API server: {text}") from None
    return ClusterView(*(list(body.get("items") or []) for body in (pods, classes, nodes, claims)))


def _policies(classes: Iterable[Mapping[str, Any]]) -> dict[str, PolicyResult]:
    policies: dict[str, PolicyResult] = {}
    for obj in classes:
        metadata = obj.get("metadata") or {}
        name = str(metadata.get("name") or "")
        annotations = {str(k): str(v) for k, v in (metadata.get("annotations") or {}).items()}
        policies[name] = parse_policy(name, annotations)
    return policies


async def build_report(
    settings: SchedulerConfig, prometheus_url: str, context: str | None = None
) -> list[JsonObject]:
    """Read the cluster (through the kubeconfig's `context`, default its current one) and
    Prometheus, return the rows. Raises ReportError."""
    if settings.kubeconfig is not None and not settings.kubeconfig.is_file():
        raise ReportError(f"kubeconfig {str(settings.kubeconfig)[:200]}: no such file")
    view = await _read_cluster(settings.kubeconfig, context)
    pods = [parse_pod(obj) for obj in view.pods]
    holdings = report_holdings(
        pods,
        (parse_node(obj) for obj in view.nodes),
        (parse_resource_claim(obj) for obj in view.claims),
        settings.dra.gpu_drivers,
    )
    holders = holders_of(pods, holdings)
    priorities = {(p.namespace, p.name): p.priority for p in pods}
    measure = measure_of(settings)
    async with _prometheus(settings, prometheus_url) as prometheus:
        try:
            windows = await measure_holders(
                prometheus, holders, PERIOD_S, measure.idle_window_s, measure.scrape_interval_s
            )
        except PrometheusQueryFailed as error:
            raise ReportError(_cut(str(error))) from None
    policies = _policies(view.classes)
    return report_rows(holders, priorities, windows.idle, policies, measure, time.time())


def _prometheus(settings: SchedulerConfig, url: str) -> PrometheusClient:
    """A client with the reclaim settings' timeout and labels; ReportError for a bad URL."""
    reclaim = settings.reclaim
    try:
        return PrometheusClient(
            url,
            timeout_s=reclaim.prometheus_timeout_seconds,
            label_names=LabelNames(namespace=reclaim.namespace_label, pod=reclaim.pod_label),
        )
    except ValueError as error:
        raise ReportError(f"--prometheus-url: {_cut(str(error))}") from None


async def busy_share_plot(
    settings: SchedulerConfig,
    prometheus_url: str,
    path: Path,
    window_s: float = DEFAULT_WINDOW_S,
    namespace: str | None = None,
) -> list[NamespaceHistory]:
    """Read the busy share per namespace over the last `window_s` seconds from Prometheus and
    draw it into `path` (`plots.plot_busy_share`); returns the histories drawn. Raises
    ReportError when Prometheus fails, holds no busy time for the window, or `path` cannot be
    written."""
    async with _prometheus(settings, prometheus_url) as prometheus:
        try:
            history = await read_busy_history(
                prometheus,
                window_s,
                time.time(),
                settings.accounting.period_seconds,
                settings.reclaim.scrape_interval_seconds,
                namespace,
            )
        except PrometheusQueryFailed as error:
            raise ReportError(_cut(str(error))) from None
    window = duration_text(window_s).removeprefix(">= ")
    if not history.namespaces:
        where = f" of namespace {namespace}" if namespace else ""
        raise ReportError(
            f"--plot: no measured GPU time{where} in Prometheus over the last {window}; does it "
            "scrape gpu-scheduler's /metrics (manifests/monitoring/prometheus.yml)?"
        )
    title = f"idle-report: busy share of measured GPU time per namespace, last {window}"
    try:
        return plot_busy_share(history, path, title)
    except OSError as error:
        raise ReportError(f"--plot {path}: {_cut(str(error))}") from None


def _settings(args: argparse.Namespace) -> SchedulerConfig:
    settings = config_from_args(args, os.environ)
    accounting = settings.accounting
    for flag, name, value in (
        ("--idle-window", "idle_window_seconds", args.idle_window),
        ("--threshold", "idle_usage_threshold_percent", args.threshold),
    ):
        if value is None:
            continue
        try:
            accounting = replace(accounting, **{name: value})
        except ConfigError as error:
            raise ConfigError("", error.reason, flag) from None
    return replace(settings, accounting=accounting)


def run_idle_report(args: argparse.Namespace) -> int:
    try:
        settings = _settings(args)
    except ConfigError as error:
        print(f"gpu-scheduler idle-report: invalid configuration: {error}", file=sys.stderr)
        return 2
    url = args.prometheus_url or settings.reclaim.prometheus_url
    if not url:
        print(
            "gpu-scheduler idle-report: no Prometheus: give --prometheus-url URL "
            "(or reclaim.prometheusUrl in --config)",
            file=sys.stderr,
        )
        return 2
    if args.plot is not None:
        try:
            check_plot_target(args.plot)
        except ValueError as error:
            print(f"gpu-scheduler idle-report: {error}", file=sys.stderr)
            return 2
    try:
        rows = asyncio.run(build_report(settings, url, args.context))
    except ReportError as error:
        print(f"gpu-scheduler idle-report: {error}", file=sys.stderr)
        return 1
    if args.namespace:
        rows = [row for row in rows if row["namespace"] == args.namespace]
    text = structured(rows, args.output)
    if text is not None:
        print(text)
    elif rows:
        print(render_table(rows))
    else:
        window = duration_text(settings.accounting.idle_window_seconds).removeprefix(">= ")
        where = f" in namespace {args.namespace}" if args.namespace else ""
        print(f"no pod{where} holds GPUs idle over the last {window}")
    if args.plot is not None:
        plot = busy_share_plot(settings, url, args.plot, args.plot_window, args.namespace)
        try:
            asyncio.run(plot)
        except ReportError as error:
            print(f"gpu-scheduler idle-report: {error}", file=sys.stderr)
            return 1
    return 0


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text[:40]!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be > 0, got {text[:40]!r}")
    return value


def add_idle_report_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "idle-report", help="list pods holding GPUs idle over the idle window, and their policy"
    )
    parser.add_argument("--prometheus-url", help="Prometheus base URL (default: the config's)")
    parser.add_argument(
        "--idle-window",
        type=_positive,
        metavar="SECONDS",
        help="default accounting.idleWindowSeconds",
    )
    parser.add_argument(
        "--threshold",
        type=_positive,
        metavar="PERCENT",
        help="usage under this is idle (default accounting.idleUsageThresholdPercent)",
    )
    parser.add_argument(
        "-n", "--namespace", metavar="NAMESPACE", help="only this namespace's pods (default: all)"
    )
    add_output_flag(parser)
    add_plot_flag(parser, "the busy share of measured GPU time per namespace over time")
    parser.add_argument(
        "--plot-window",
        type=_positive,
        default=DEFAULT_WINDOW_S,
        metavar="SECONDS",
        help=f"with --plot: how far back to draw (default {DEFAULT_WINDOW_S:g}, one day)",
    )
    add_config_flags(parser)
    add_context_flag(parser)
    parser.set_defaults(handler=run_idle_report)
