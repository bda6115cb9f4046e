"""Prometheus for the local control plane: a generated config and a readiness probe.

Prometheus comes from Debian's `prometheus` package. The harness runs it on loopback with its data
in the cluster's work folder, scraping the fake dcgm-exporter (job `dcgm-exporter`, the job name the
real exporter's Helm chart uses) at a short interval so tests see a window fill in seconds.
"""

from __future__ import annotations

from pathlib import Path

import yaml

DCGM_JOB = "dcgm-exporter"


def write_config(path: Path, dcgm_target: str | None, scrape_interval_s: float) -> Path:
    """Write prometheus.yml scraping `dcgm_target` (host:port) every `scrape_interval_s` seconds."""
    interval = f"{max(scrape_interval_s, 0.1):g}s"
    scrape_configs = []
    if dcgm_target is not None:
        scrape_configs.append(
            {
                "job_name": DCGM_JOB,
                "scrape_interval": interval,
                "scrape_timeout": interval,
                "static_configs": [{"targets": [dcgm_target]}],
            }
        )
    config = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "scrape_configs": scrape_configs,
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def argv(
    binary: Path, config: Path, data_dir: Path, port: int, address: str = "127.0.0.1"
) -> list[str]:
    """Command line of a Prometheus on `address` (loopback unless pods must reach it) keeping two
    hours of data."""
    return [
        str(binary),
        f"--config.file={config}",
        f"--storage.tsdb.path={data_dir}",
        f"--web.listen-address={address}:{port}",
        "--storage.tsdb.retention.time=2h",
        "--log.level=warn",
    ]
