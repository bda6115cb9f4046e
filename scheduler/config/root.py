"""`SchedulerConfig`, the root of the tree: the top-level settings, one field per section, and
the invariant between sections (write timeouts against the Lease's renew deadline)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from scheduler.config.allocation import AllocationTrackingConfig
from scheduler.config.binding import BindingConfig
from scheduler.config.dra import DraSettings
from scheduler.config.errors import ConfigError, Invalid
from scheduler.config.health import HealthConfig
from scheduler.config.leader_election import LeaderElectionConfig
from scheduler.config.metrics_serving import MetricsServingConfig
from scheduler.config.queue import BackoffConfig, QueueConfig
from scheduler.config.readers import (
    LOG_LEVELS,
    dns_subdomain,
    fmt,
    host_port,
    optional_path,
    show,
    split_host_port,
)
from scheduler.config.reclaim import AccountingConfig, PreemptionConfig, ReclaimConfig
from scheduler.config.scoring import ScoringConfig
from scheduler.config.sharing import SharingConfig
from scheduler.config.tree import check_settings, nested, reads
from scheduler.config.webhooks import WebhooksConfig


def _log_level(value: object) -> str:
    if isinstance(value, str) and value.lower() in LOG_LEVELS:
        return value.lower()
    raise Invalid(f"must be one of {', '.join(LOG_LEVELS)}, got {show(value)}")


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """The whole configuration of one `gpu-scheduler run` process."""

    scheduler_name: str = field(default="gpu-scheduler", metadata=reads(dns_subdomain))
    """Pods whose spec.schedulerName equals this are ours; a DNS-1123 subdomain."""
    kubeconfig: Path | None = field(default=None, metadata=reads(optional_path))
    """Kubeconfig file to reach the API server; null uses the in-cluster service account.
    The KUBECONFIG environment variable is not consulted."""
    log_level: str = field(default="info", metadata=reads(_log_level))
    """Least severe log level written: debug, info, warning or error."""
    metrics_address: str = field(default="0.0.0.0:10261", metadata=reads(host_port))
    """host:port of the /metrics, /healthz, /readyz and /livez server ([::]:port for IPv6)."""
    metrics_serving: MetricsServingConfig = field(
        default_factory=MetricsServingConfig, metadata=nested(MetricsServingConfig)
    )
    """HTTPS and delegated authentication and authorization of that server (off by default)."""
    scoring: ScoringConfig = field(default_factory=ScoringConfig, metadata=nested(ScoringConfig))
    """Node ranking."""
    binding: BindingConfig = field(default_factory=BindingConfig, metadata=nested(BindingConfig))
    """The binding cycle."""
    backoff: BackoffConfig = field(default_factory=BackoffConfig, metadata=nested(BackoffConfig))
    """Per-pod retry backoff."""
    queue: QueueConfig = field(default_factory=QueueConfig, metadata=nested(QueueConfig))
    """The scheduling queue."""
    leader_election: LeaderElectionConfig = field(
        default_factory=LeaderElectionConfig, metadata=nested(LeaderElectionConfig)
    )
    """Leader election."""
    reclaim: ReclaimConfig = field(default_factory=ReclaimConfig, metadata=nested(ReclaimConfig))
    """Reclaim of idle GPUs when a pod fits nowhere."""
    accounting: AccountingConfig = field(
        default_factory=AccountingConfig, metadata=nested(AccountingConfig)
    )
    """GPU time accounting and the idle GPU gauge."""
    webhooks: WebhooksConfig = field(
        default_factory=lambda: WebhooksConfig(), metadata=nested(WebhooksConfig)
    )
    """Admission webhooks served by every replica (see docs/operations.md)."""
    preemption: PreemptionConfig = field(
        default_factory=PreemptionConfig, metadata=nested(PreemptionConfig)
    )
    """Priority preemption when a pod fits nowhere and idle reclaim made no room."""
    dra: DraSettings = field(default_factory=DraSettings, metadata=nested(DraSettings))
    """Dynamic Resource Allocation."""
    sharing: SharingConfig = field(default_factory=SharingConfig, metadata=nested(SharingConfig))
    """Time-sliced and MPS GPUs of the device plugin."""
    health: HealthConfig = field(default_factory=HealthConfig, metadata=nested(HealthConfig))
    """GPU health: GPUs dcgm-exporter reports sick are never chosen."""
    allocation_tracking: AllocationTrackingConfig = field(
        default_factory=AllocationTrackingConfig, metadata=nested(AllocationTrackingConfig)
    )
    """The GPU indices pods on device-plugin nodes really hold, from dcgm-exporter."""
    # Further sections go here; the loader, overrides and unknown-key checks pick them up.

    def __post_init__(self) -> None:
        check_settings(self)
        _check_write_timeouts(self.binding, self.leader_election)

    @property
    def metrics_host(self) -> str:
        """Host part of `metrics_address` ("" = all interfaces; IPv6 without brackets)."""
        return split_host_port(self.metrics_address)[0]

    @property
    def metrics_port(self) -> int:
        """Port part of `metrics_address`."""
        return split_host_port(self.metrics_address)[1]

    @property
    def logging_level(self) -> int:
        """`log_level` as a `logging` module level number."""
        return int(logging.getLevelName(self.log_level.upper()))


def _check_write_timeouts(binding: BindingConfig, election: LeaderElectionConfig) -> None:
    """With leader election on, every write is fenced by the Lease (`scheduler.kube.fence`): it
    may start until the renew deadline of the last successful renewal, and its timeout is cut to
    end by then. A leader renews every retry period, so a write started at any moment of a
    healthy term has at least `renewDeadline - retryPeriod` left: a configured write timeout
    longer than that would be cut short in healthy terms, i.e. it could never be honoured."""
    if not election.enabled:
        return
    budget = election.renew_deadline_seconds - election.retry_period_seconds
    if binding.timeout_seconds > budget:
        raise ConfigError(
            "binding.timeoutSeconds",
            "must be <= leaderElection.renewDeadlineSeconds - leaderElection.retryPeriodSeconds "
            f"({fmt(budget)}) with leader election on (writes are cut off at the renew deadline), "
            f"got {fmt(binding.timeout_seconds)}",
            related=("leaderElection.renewDeadlineSeconds", "leaderElection.retryPeriodSeconds"),
        )
