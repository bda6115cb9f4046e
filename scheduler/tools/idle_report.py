"""`gpu-scheduler idle-report`: the pods holding GPUs idle over the idle window, and whether reclaim
could take them.

    gpu-scheduler idle-report [--kubeconfig FILE] [--config FILE] [--prometheus-url URL]
                              [--idle-window SECONDS] [--threshold PERCENT] [-o table|json]

Reads every pod and PriorityClass from the API server (the kubeconfig flag as the other
subcommands; default: in-cluster), and sends Prometheus the same single query as the daemon's GPU
time sampler (`reclaim.accounting_query`). A pod is listed when `reclaim.usage.idle_verdict`
finds it idle over the idle window (default `accounting.idleWindowSeconds` and
`accounting.idleUsageThresholdPercent` of `--config`), with the reclaim policy of its
PriorityClass judged by `reclaim.policy.victim_eligibility` for a preemptor of exactly the
policy's minimum-preemptable-priority: either the priority a preemptor needs, or why no policy
applies (none, invalid, within toleration, unknown schedule time).

"Idle for" is a lower bound: the verdict proves idleness over the whole window, not since when.
JSON rows have the keys `namespace`, `pod`, `node`, `gpus`, `usage_pct`, `idle_for_at_least_s`,
`priority_class`, `reclaimable`, `policy`. Errors (no kubeconfig, API server or Prometheus
unreachable, bad flags) are one line on stderr and exit status 1 (2 for bad configuration).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
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
from scheduler.model.objects import PodInfo, parse_pod

JsonObject = dict[str, Any]
PERIOD_S = 60.0
"""The period part of the shared query is not used here; one minute keeps it cheap."""
MAX_ERROR_CHARS = 300


class ReportError(Exception):
    """A one-line reason the report could not be made."""


def holders_of(pods: Iterable[PodInfo]) -> list[Holder]:
    """The pods bound to a node, not finished, requesting whole GPUs."""
    return [h for pod in pods if (h := holder_of(pod, pod.node_name)) is not None]


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


async def _read_cluster(kubeconfig: Path | None) -> tuple[list[JsonObject], list[JsonObject]]:
    """(pods, PriorityClasses) as plain JSON; ReportError for an unusable kubeconfig or an API
    server that does not answer."""
    from kubernetes_asyncio import client
    from kubernetes_asyncio.config import ConfigException

    from scheduler.kube.apierrors import expect_success
    from scheduler.kube.client import api_client_for

    where = f"kubeconfig {str(kubeconfig)[:200]}" if kubeconfig else "in-cluster configuration"
    try:
        api_client = await api_client_for(str(kubeconfig) if kubeconfig else None)
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
    except Exception as error:  # any transport or API failure: one line, no traceback
        text = _cut(str(error) or type(error).__name__)
        raise ReportError(f"cannot read pods from the API server: {text}") from None
    return list(pods.get("items") or []), list(classes.get("items") or [])


def _policies(classes: Iterable[Mapping[str, Any]]) -> dict[str, PolicyResult]:
    policies: dict[str, PolicyResult] = {}
    for obj in classes:
        metadata = obj.get("metadata") or {}
        name = str(metadata.get("name") or "")
        annotations = {str(k): str(v) for k, v in (metadata.get("annotations") or {}).items()}
        policies[name] = parse_policy(name, annotations)
    return policies


async def build_report(settings: SchedulerConfig, prometheus_url: str) -> list[JsonObject]:
    """Read the cluster and Prometheus, return the rows. Raises ReportError."""
    if settings.kubeconfig is not None and not settings.kubeconfig.is_file():
        raise ReportError(f"kubeconfig {str(settings.kubeconfig)[:200]}: no such file")
    objects, classes = await _read_cluster(settings.kubeconfig)
    pods = [parse_pod(obj) for obj in objects]
    holders = holders_of(pods)
    priorities = {(p.namespace, p.name): p.priority for p in pods}
    measure = measure_of(settings)
    reclaim = settings.reclaim
    try:
        prometheus = PrometheusClient(
            prometheus_url,
            timeout_s=reclaim.prometheus_timeout_seconds,
            label_names=LabelNames(namespace=reclaim.namespace_label, pod=reclaim.pod_label),
        )
    except ValueError as error:
        raise ReportError(f"--prometheus-url: {_cut(str(error))}") from None
    async with prometheus:
        try:
            windows = await measure_holders(
                prometheus, holders, PERIOD_S, measure.idle_window_s, measure.scrape_interval_s
            )
        except PrometheusQueryFailed as error:
            raise ReportError(_cut(str(error))) from None
    return report_rows(holders, priorities, windows.idle, _policies(classes), measure, time.time())


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
    try:
        rows = asyncio.run(build_report(settings, url))
    except ReportError as error:
        print(f"gpu-scheduler idle-report: {error}", file=sys.stderr)
        return 1
    if args.output == "json":
        print(json.dumps(rows, indent=2))
    elif rows:
        print(render_table(rows))
    else:
        window = duration_text(settings.accounting.idle_window_seconds).removeprefix(">= ")
        print(f"no pod holds GPUs idle over the last {window}")
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
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table")
    add_config_flags(parser)
    parser.set_defaults(handler=run_idle_report)
