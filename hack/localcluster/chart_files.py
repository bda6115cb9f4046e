"""The kustomize base's files the chart ships under `charts/gpu-scheduler/files/`, copied from
`manifests/`, and the command that refreshes the copies.

    python -m hack.localcluster.chart_files          # copy every changed file, name each
    python -m hack.localcluster.chart_files --check  # exit 1 naming each stale copy

`manifests/` is the source: `kubectl apply -k manifests/` installs it as it is, and other tests
read it. Helm reads only files inside a chart, so the chart carries copies of those it takes over
unchanged (RBAC rules, the admission policies' CEL, the webhook objects, the Prometheus rules)
and its templates re-home their objects into the release. tests/unit/test_chart_drift.py fails
while a copy differs from its source.
"""

from __future__ import annotations

import argparse
import shutil
import sys

from hack.localcluster.cluster import REPO_ROOT
from hack.localcluster.helm import CHART

MANIFESTS = REPO_ROOT / "manifests"
COPIES = {
    "files/rbac.yaml": "rbac.yaml",
    "files/metrics-reader.yaml": "metrics-reader.yaml",
    "files/fencing-policy.yaml": "fencing-policy.yaml",
    "files/reclaim-annotations-policy.yaml": "reclaim-annotations-policy.yaml",
    "files/prometheus-rules.yaml": "monitoring/rules.yaml",
    "files/webhooks/webhooks.yaml": "webhooks/webhooks.yaml",
    "files/webhooks/webhook-certificate.yaml": "webhooks/webhook-certificate.yaml",
    "files/webhooks/webhook-validating.yaml": "webhooks/webhook-validating.yaml",
}
"""Chart file (relative to the chart) -> its source (relative to manifests/)."""


def stale() -> list[str]:
    """The chart files that are missing or differ from their source, as chart-relative paths."""
    return [
        copy
        for copy, source in COPIES.items()
        if not (CHART / copy).is_file()
        or (CHART / copy).read_bytes() != (MANIFESTS / source).read_bytes()
    ]


def sync() -> list[str]:
    """Copy every stale file from its source; returns the chart-relative paths copied."""
    copied = stale()
    for copy in copied:
        (CHART / copy).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(MANIFESTS / COPIES[copy], CHART / copy)
    return copied


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hack.localcluster.chart_files",
        description="Copy manifests/ files the Helm chart ships into charts/gpu-scheduler/files/.",
    )
    parser.add_argument("--check", action="store_true", help="only name the stale copies")
    args = parser.parse_args(argv)
    if args.check:
        for copy in stale():
            print(f"charts/gpu-scheduler/{copy} differs from manifests/{COPIES[copy]}")
        return 1 if stale() else 0
    for copy in sync():
        print(f"copied manifests/{COPIES[copy]} to charts/gpu-scheduler/{copy}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
