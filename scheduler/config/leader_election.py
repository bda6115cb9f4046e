"""The `leaderElection` section: leader election on a Lease, and the default identity."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from scheduler.config.errors import ConfigError
from scheduler.config.readers import (
    boolean,
    dns_label,
    dns_subdomain,
    fmt,
    integer,
    non_empty_string,
    positive_seconds,
)
from scheduler.config.tree import check_settings, reads


def default_identity(env: Mapping[str, str]) -> str:
    """`POD_NAME` when set (the downward API), else `<hostname>_<random uuid>` as kube-scheduler."""
    return env.get("POD_NAME") or f"{socket.gethostname()}_{uuid.uuid4()}"


@dataclass(frozen=True, slots=True)
class LeaderElectionConfig:
    """Leader election on a coordination.k8s.io/v1 Lease; only the leader schedules.

    Timing defaults are kube-scheduler's (15 s / 10 s / 2 s). Invariant:
    `leaseDurationSeconds > renewDeadlineSeconds > retryPeriodSeconds > 0`.
    """

    enabled: bool = field(default=True, metadata=reads(boolean))
    """Compete for the Lease; false makes this process always the leader (one replica only)."""
    lease_name: str = field(default="gpu-scheduler", metadata=reads(dns_subdomain))
    """Name of the Lease object."""
    lease_namespace: str = field(default="kube-system", metadata=reads(dns_label))
    """Namespace of the Lease object."""
    lease_duration_seconds: int = field(default=15, metadata=reads(integer(1, 2**31 - 1)))
    """How long followers wait after last seeing the Lease change before taking it over; written
    to the Lease's spec.leaseDurationSeconds (an integer there)."""
    renew_deadline_seconds: float = field(default=10.0, metadata=reads(positive_seconds))
    """The leader stops leading when it has not renewed the Lease for this long."""
    retry_period_seconds: float = field(default=2.0, metadata=reads(positive_seconds))
    """Interval between attempts to renew (leader) or acquire (followers)."""
    identity: str = field(
        default_factory=lambda: default_identity(os.environ), metadata=reads(non_empty_string)
    )
    """This candidate's holderIdentity; default `POD_NAME`, else `<hostname>_<random uuid>`."""

    def __post_init__(self) -> None:
        check_settings(self)
        lease, renew, retry = (
            self.lease_duration_seconds,
            self.renew_deadline_seconds,
            self.retry_period_seconds,
        )
        if not lease > renew:
            raise ConfigError(
                "leaseDurationSeconds",
                f"must be an integer > renewDeadlineSeconds ({fmt(renew)}), got {lease}",
                related=("renewDeadlineSeconds",),
            )
        if not renew > retry:
            raise ConfigError(
                "renewDeadlineSeconds",
                f"must be > retryPeriodSeconds ({fmt(retry)}), got {fmt(renew)}",
                related=("retryPeriodSeconds",),
            )
