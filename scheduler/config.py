"""The daemon's configuration: defaults, one YAML file, environment overrides, command-line flags.

Layers, later wins key by key:

1. defaults: the dataclasses below (`SchedulerConfig` at the top);
2. the YAML file of `gpu-scheduler run --config FILE`, camelCase keys as in Kubernetes component
   configs (`leaderElection.leaseDurationSeconds`);
3. environment variables `GPU_SCHEDULER_*` (`ENV_OVERRIDES`; empty values are ignored);
4. command-line flags (`add_config_flags`), or any `overrides` passed to `load_config`.

Everything is validated once, at start. Every problem is a `ConfigError` whose message starts with
where the value came from and its key path, e.g.
`config.yaml: leaderElection.leaseDurationSeconds: must be an integer > renewDeadlineSeconds (10),
got 5`; `.key` holds the path. Unknown keys are errors too, with a "did you mean" suggestion.

Shape: a tree of frozen dataclasses. A *section* is a field with `metadata=_nested(cls)`; a
*setting* is a field with `metadata=_reads(reader)`, where the reader converts one raw value (ints
to floats, strings to paths) or raises `_Invalid` with a reason. The loader walks the tree
generically, so adding a section (the reclaim policy's, for one) means writing its dataclass and
adding one section field to `SchedulerConfig`; until then its keys are rejected as unknown.
Invariants between settings of one section live in that section's `__post_init__`, which also
re-checks every setting, so a configuration built in code is held to the same rules as one read
from a file.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import ipaddress
import logging
import math
import os
import re
import socket
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TypeVar

import yaml

from topology.scoring import ScoreWeights
from topology.text import clip, quote

T = TypeVar("T")
Reader = Callable[[object], Any]
"""Converts one raw value to the setting's type, or raises `_Invalid` with a reason."""

_READER: Final = "reader"
_SECTION: Final = "section"
_LEAF_READER: Final = "leaf_reader"

DEFAULT_SOURCE: Final = "defaults"
OVERRIDE_SOURCE: Final = "override"
LOG_LEVELS: Final = ("debug", "info", "warning", "error")


class ConfigError(ValueError):
    """A configuration value is missing its mark; the message says where it came from and why.

    `key` is the camelCase key path (`leaderElection.leaseDurationSeconds`; "" for the document
    itself), `source` the file, environment variable or flag that supplied the value (None when
    the configuration was built in code), `reason` the bare explanation. `related` names sibling
    keys an invariant involves, so the loader can point at whichever of them was set.
    """

    def __init__(
        self, key: str, reason: str, source: str | None = None, related: tuple[str, ...] = ()
    ) -> None:
        self.key = key
        self.reason = reason
        self.source = source
        self.related = related
        parts = [part for part in (source, key) if part]
        super().__init__(": ".join([*parts, reason]))


class _Invalid(Exception):
    """A reader's rejection of one value; the loader turns it into a `ConfigError`."""


# --- readers -----------------------------------------------------------------------------------


ECHO_LIMIT = 60
"""Characters of a configured value or key echoed in an error."""


def _show(value: object) -> str:
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple | set | frozenset):
        return "a list"
    return quote(value, ECHO_LIMIT)


def _fmt(number: float) -> str:
    return f"{number:g}"


def _finite(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _Invalid(f"must be {what}, got {_show(value)}")
    try:
        number = float(value)
    except OverflowError:
        raise _Invalid(f"must be {what}, got a number too large") from None
    if not math.isfinite(number):
        raise _Invalid(f"must be {what}, got {_show(value)}")
    return number


def _number(minimum: float | None = None) -> Reader:
    """A finite float (ints accepted), at least `minimum` when given."""
    what = "a number" if minimum is None else f"a number >= {_fmt(minimum)}"

    def read(value: object) -> float:
        number = _finite(value, what)
        if minimum is not None and number < minimum:
            raise _Invalid(f"must be {what}, got {_show(value)}")
        return number

    return read


def _positive_seconds(value: object) -> float:
    number = _finite(value, "a number of seconds > 0")
    if number <= 0:
        raise _Invalid(f"must be a number of seconds > 0, got {_show(value)}")
    return number


def _fraction(value: object) -> float:
    number = _finite(value, "a number between 0 and 1")
    if not 0.0 <= number <= 1.0:
        raise _Invalid(f"must be a number between 0 and 1, got {_show(value)}")
    return number


def _integer(minimum: int, maximum: int | None = None) -> Reader:
    """An int (not a bool) in `minimum..maximum`."""
    what = f"an integer >= {minimum}" if maximum is None else f"an integer {minimum}..{maximum}"

    def read(value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _Invalid(f"must be {what}, got {_show(value)}")
        if value < minimum or (maximum is not None and value > maximum):
            raise _Invalid(f"must be {what}, got {_show(value)}")
        return value

    return read


def _boolean(value: object) -> bool:
    if not isinstance(value, bool):
        raise _Invalid(f"must be true or false, got {_show(value)}")
    return value


def _text(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _Invalid(f"must be a non-empty string, got {_show(value)}")
    return value


_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")
_DNS_LABEL_RE = re.compile(_DNS_LABEL)


def _dns_subdomain(value: object) -> str:
    """Kubernetes' DNS-1123 subdomain, the rule for object names and a pod's schedulerName."""
    text = _text(value)
    if len(text) > 253 or not _DNS_SUBDOMAIN.fullmatch(text):
        raise _Invalid(
            "must be a DNS-1123 subdomain (lower-case letters, digits, '-' and '.', starting and "
            f"ending with a letter or digit, at most 253 characters), got {_show(value)}"
        )
    return text


def _dns_label(value: object) -> str:
    """Kubernetes' DNS-1123 label, the rule for namespace names."""
    text = _text(value)
    if len(text) > 63 or not _DNS_LABEL_RE.fullmatch(text):
        raise _Invalid(
            "must be a DNS-1123 label (lower-case letters, digits and '-', starting and ending "
            f"with a letter or digit, at most 63 characters), got {_show(value)}"
        )
    return text


def _optional_path(value: object) -> Path | None:
    if value is None or isinstance(value, Path):
        return value
    if not isinstance(value, str) or not value.strip():
        raise _Invalid(f"must be a file path or null, got {_show(value)}")
    return Path(value)


def _log_level(value: object) -> str:
    if isinstance(value, str) and value.lower() in LOG_LEVELS:
        return value.lower()
    raise _Invalid(f"must be one of {', '.join(LOG_LEVELS)}, got {_show(value)}")


_HOSTNAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?")


def split_host_port(address: str) -> tuple[str, int]:
    """`host:port` -> (host, port); IPv6 hosts come bracketed (`[::]:10261` -> ("::", 10261)).

    The host may be empty (all interfaces). Raises `ValueError` with a reason otherwise.
    """
    host, sep, port_text = address.rpartition(":")
    if not sep:
        raise ValueError("no ':port'")
    if not port_text.isascii() or not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise ValueError("the port must be 1..65535")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"{host!r} is not an IPv6 address") from None
    elif ":" in host:
        raise ValueError("IPv6 hosts must be in brackets, e.g. [::]:10261")
    elif host and not _HOSTNAME.fullmatch(host):
        raise ValueError(f"{host!r} is not a host name or IP address")
    return host, int(port_text)


def _host_port(value: object) -> str:
    if not isinstance(value, str):
        raise _Invalid(f"must be host:port, got {_show(value)}")
    try:
        split_host_port(value)
    except ValueError as error:
        raise _Invalid(f"must be host:port ({error}), got {_show(value)}") from None
    return value


def _weight_reader(name: str) -> Reader:
    """`ScoreWeights` fields: ratios and thresholds are fractions, everything else signed points."""
    return _fraction if name.endswith(("_ratio", "_threshold")) else _number()


# --- the dataclass tree -----------------------------------------------------------------------


def _reads(reader: Reader) -> dict[str, Any]:
    """Field metadata of a setting read with `reader`."""
    return {_READER: reader}


def _nested(cls: type[Any], leaf_reader: Callable[[str], Reader] | None = None) -> dict[str, Any]:
    """Field metadata of a section; `leaf_reader` reads, by name, the fields of a class defined
    elsewhere (it has no `_reads` metadata of its own)."""
    return {_SECTION: cls, _LEAF_READER: leaf_reader}


def camel(name: str) -> str:
    """A Python field name as its YAML key: `lease_duration_seconds` -> `leaseDurationSeconds`."""
    first, *rest = name.split("_")
    return first + "".join(word[:1].upper() + word[1:] for word in rest)


def _check_settings(instance: object) -> None:
    """Run every setting's reader on `instance` (converting in place); `ConfigError` on failure."""
    for spec in dataclasses.fields(instance):  # type: ignore[arg-type]
        reader = spec.metadata.get(_READER)
        section = spec.metadata.get(_SECTION)
        value = getattr(instance, spec.name)
        if reader is not None:
            try:
                object.__setattr__(instance, spec.name, reader(value))
            except _Invalid as error:
                raise ConfigError(camel(spec.name), str(error)) from None
        elif section is not None:
            if not isinstance(value, section):
                raise ConfigError(
                    camel(spec.name), f"must be a {section.__name__}, got {_show(value)}"
                )
            leaf_reader = spec.metadata.get(_LEAF_READER)
            if leaf_reader is None:
                continue
            for leaf in dataclasses.fields(value):
                try:
                    leaf_reader(leaf.name)(getattr(value, leaf.name))
                except _Invalid as error:
                    key = f"{camel(spec.name)}.{camel(leaf.name)}"
                    raise ConfigError(key, str(error)) from None


def default_identity(env: Mapping[str, str]) -> str:
    """`POD_NAME` when set (the downward API), else `<hostname>_<random uuid>` as kube-scheduler."""
    return env.get("POD_NAME") or f"{socket.gethostname()}_{uuid.uuid4()}"


@dataclass(frozen=True, slots=True)
class ScoringConfig:
    """How feasible nodes are ranked (see `topology.scoring`)."""

    weights: ScoreWeights = field(
        default_factory=ScoreWeights, metadata=_nested(ScoreWeights, _weight_reader)
    )
    """Every number of the NVLink-domain score; ratios and thresholds are fractions in [0, 1]."""
    preferred_affinity_weight: float = field(default=1.0, metadata=_reads(_number(minimum=0.0)))
    """Multiplier of the preferred-node-affinity score added to the NVLink score (0 ignores it)."""
    fragmentation_weight: float = field(default=10.0, metadata=_reads(_number(minimum=0.0)))
    """Multiplier of the GPU-fragmentation score (`scheduler.plugins.gpu_fragmentation`): the
    change of a node's expected free GPUs left without enough cpu or memory (0 turns it off)."""
    seed: int = field(default=0, metadata=_reads(_integer(0)))
    """Seed of the random generator that breaks ties between equally scored nodes."""

    def __post_init__(self) -> None:
        _check_settings(self)


@dataclass(frozen=True, slots=True)
class BindingConfig:
    """The asynchronous binding cycle (POST pods/{name}/binding)."""

    concurrency: int = field(default=1000, metadata=_reads(_integer(1)))
    """Bindings in flight at once; further placed pods wait for a slot. A safety cap: `qps`
    is what bounds the binds (kube-scheduler binds each pod in its own goroutine)."""
    timeout_seconds: float = field(default=5.0, metadata=_reads(_positive_seconds))
    """Time allowed for one binding call; past it the pod is forgotten and requeued. With leader
    election on, at most `renewDeadlineSeconds - retryPeriodSeconds` (see `SchedulerConfig`)."""
    qps: float = field(default=100.0, metadata=_reads(_number(0.0)))
    """Client-side rate limit of Binding calls a second (client-go's token bucket, what bounds
    kube-scheduler's binds); 0 means none, only `concurrency` bounds them."""
    burst: int = field(default=200, metadata=_reads(_integer(0)))
    """Binding calls the rate limit lets through at once after a quiet spell; 0 means twice
    `qps` (at least 1)."""

    def __post_init__(self) -> None:
        _check_settings(self)


@dataclass(frozen=True, slots=True)
class BackoffConfig:
    """Per-pod backoff after a failed attempt: doubles from the initial value up to the maximum."""

    initial_seconds: float = field(default=1.0, metadata=_reads(_positive_seconds))
    """Backoff after the first failed attempt (kube-scheduler's podInitialBackoffSeconds)."""
    max_seconds: float = field(default=10.0, metadata=_reads(_positive_seconds))
    """Backoff ceiling (kube-scheduler's podMaxBackoffSeconds); at least `initialSeconds`."""

    def __post_init__(self) -> None:
        _check_settings(self)
        if self.max_seconds < self.initial_seconds:
            raise ConfigError(
                "maxSeconds",
                f"must be >= initialSeconds ({_fmt(self.initial_seconds)}), "
                f"got {_fmt(self.max_seconds)}",
                related=("initialSeconds",),
            )


@dataclass(frozen=True, slots=True)
class QueueConfig:
    """The scheduling queue."""

    unschedulable_flush_seconds: float = field(default=60.0, metadata=_reads(_positive_seconds))
    """Pods in the unschedulable pool longer than this are retried even without a cluster event
    that could help them (kube-scheduler's podMaxInUnschedulablePodsDuration, default 5 min)."""
    pop_from_backoff: bool = field(default=True, metadata=_reads(_boolean))
    """When activeQ is empty, try the pod in backoffQ whose backoff ends first instead of waiting
    (kube-scheduler's SchedulerPopFromBackoffQ, beta and on by default since 1.33); pods backing
    off after an error still wait their backoff out."""

    def __post_init__(self) -> None:
        _check_settings(self)


@dataclass(frozen=True, slots=True)
class LeaderElectionConfig:
    """Leader election on a coordination.k8s.io/v1 Lease; only the leader schedules.

    Timing defaults are kube-scheduler's (15 s / 10 s / 2 s). Invariant:
    `leaseDurationSeconds > renewDeadlineSeconds > retryPeriodSeconds > 0`.
    """

    enabled: bool = field(default=True, metadata=_reads(_boolean))
    """Compete for the Lease; false makes this process always the leader (one replica only)."""
    lease_name: str = field(default="gpu-scheduler", metadata=_reads(_dns_subdomain))
    """Name of the Lease object."""
    lease_namespace: str = field(default="kube-system", metadata=_reads(_dns_label))
    """Namespace of the Lease object."""
    lease_duration_seconds: int = field(default=15, metadata=_reads(_integer(1, 2**31 - 1)))
    """How long followers wait after last seeing the Lease change before taking it over; written
    to the Lease's spec.leaseDurationSeconds (an integer there)."""
    renew_deadline_seconds: float = field(default=10.0, metadata=_reads(_positive_seconds))
    """The leader stops leading when it has not renewed the Lease for this long."""
    retry_period_seconds: float = field(default=2.0, metadata=_reads(_positive_seconds))
    """Interval between attempts to renew (leader) or acquire (followers)."""
    identity: str = field(
        default_factory=lambda: default_identity(os.environ), metadata=_reads(_text)
    )
    """This candidate's holderIdentity; default `POD_NAME`, else `<hostname>_<random uuid>`."""

    def __post_init__(self) -> None:
        _check_settings(self)
        lease, renew, retry = (
            self.lease_duration_seconds,
            self.renew_deadline_seconds,
            self.retry_period_seconds,
        )
        if not lease > renew:
            raise ConfigError(
                "leaseDurationSeconds",
                f"must be an integer > renewDeadlineSeconds ({_fmt(renew)}), got {lease}",
                related=("renewDeadlineSeconds",),
            )
        if not renew > retry:
            raise ConfigError(
                "renewDeadlineSeconds",
                f"must be > retryPeriodSeconds ({_fmt(retry)}), got {_fmt(renew)}",
                related=("retryPeriodSeconds",),
            )


RECLAIM_MODES = ("off", "dry-run", "enforce")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def _reclaim_mode(value: object) -> str:
    if isinstance(value, str) and value in RECLAIM_MODES:
        return value
    raise _Invalid(f"must be one of {', '.join(RECLAIM_MODES)}, got {_show(value)}")


def _optional_url(value: object) -> str:
    if value is None or value == "":
        return ""
    if isinstance(value, str) and re.fullmatch(r"https?://[^\s/]+(/\S*)?", value):
        return value.rstrip("/")
    raise _Invalid(f"must be an http(s) URL or empty, got {_show(value)}")


def _label_name(value: object) -> str:
    if isinstance(value, str) and _LABEL_NAME.fullmatch(value):
        return value
    raise _Invalid(f"must be a Prometheus label name, got {_show(value)}")


def _power_models(value: object) -> dict[str, dict[str, float]]:
    """`{modelName: {idleWatts: W, maxWatts: W}}` with 0 <= idle < max."""
    if not isinstance(value, Mapping):
        raise _Invalid(f"must be a mapping of GPU model name to watts, got {_show(value)}")
    models: dict[str, dict[str, float]] = {}
    for model, watts in value.items():
        if not isinstance(model, str) or not isinstance(watts, Mapping):
            raise _Invalid(f"{_show(model)}: must map to {{idleWatts, maxWatts}}")
        if set(watts) != {"idleWatts", "maxWatts"}:
            raise _Invalid(f"{model}: needs exactly idleWatts and maxWatts, got {sorted(watts)}")
        idle = _finite(watts["idleWatts"], "a number")
        full = _finite(watts["maxWatts"], "a number")
        if not 0 <= idle < full:
            raise _Invalid(f"{model}: needs 0 <= idleWatts < maxWatts, got {idle:g} and {full:g}")
        models[model] = {"idleWatts": idle, "maxWatts": full}
    return models


@dataclass(frozen=True, slots=True)
class ReclaimConfig:
    """Reclaim of idle GPUs (the PostFilter); see docs/reclaim.md."""

    mode: str = field(default="off", metadata=_reads(_reclaim_mode))
    """off: no reclaim; dry-run: decide, log, count and report "would evict" events, evict
    nothing; enforce: evict through the Eviction API."""
    cooldown_seconds: float = field(default=30.0, metadata=_reads(_positive_seconds))
    """Minimum time between two reclaim attempts for the same pending pod."""
    prometheus_url: str = field(default="", metadata=_reads(_optional_url))
    """Base URL of the Prometheus that scrapes dcgm-exporter; empty: reclaim is skipped."""
    prometheus_timeout_seconds: float = field(default=5.0, metadata=_reads(_positive_seconds))
    """Time allowed for the usage query; slower means no eviction."""
    scrape_interval_seconds: float = field(default=30.0, metadata=_reads(_positive_seconds))
    """How often Prometheus scrapes dcgm-exporter; sets how many samples a window must hold."""
    min_coverage: float = field(default=0.8, metadata=_reads(_fraction))
    """Share of a window's expected samples a signal needs to count (fewer: not idle)."""
    namespace_label: str = field(default="namespace", metadata=_reads(_label_name))
    """Label carrying the pod's namespace on DCGM series (e.g. exported_namespace)."""
    pod_label: str = field(default="pod", metadata=_reads(_label_name))
    """Label carrying the pod's name on DCGM series (e.g. exported_pod)."""
    power_models: dict[str, dict[str, float]] = field(
        default_factory=dict, metadata=_reads(_power_models)
    )
    """Idle and full-load power per dcgm `modelName`, added to or replacing the built-in ones."""
    reservation_seconds: float = field(default=300.0, metadata=_reads(_positive_seconds))
    """How long the room freed for a nominated pod stays reserved for it."""


MAX_IDLE_WINDOW_SECONDS = 30 * 86400
"""accounting.idleWindowSeconds: at most 30 days, as a reclaim policy's idle window."""


def _idle_window(value: object) -> float:
    seconds = _finite(value, "a number of seconds")
    if not 1.0 <= seconds <= MAX_IDLE_WINDOW_SECONDS:
        raise _Invalid(
            f"must be from 1 to {MAX_IDLE_WINDOW_SECONDS} seconds (30 days), got {_show(value)}"
        )
    return seconds


def _threshold_percent(value: object) -> float:
    number = _finite(value, "a number")
    if not 0.0 < number <= 100.0:
        raise _Invalid(f"must be a number greater than 0 and at most 100, got {_show(value)}")
    return number


@dataclass(frozen=True, slots=True)
class AccountingConfig:
    """GPU time accounting: allocated, busy and idle GPU time (see reclaim.accounting). Reads the
    Prometheus of `reclaim.prometheusUrl` with the reclaim settings for scrape interval, coverage,
    labels and power models; without that URL nothing is measured."""

    enabled: bool = field(default=True, metadata=_reads(_boolean))
    """Sample GPU time and export it (read-only: every replica exports)."""
    period_seconds: float = field(default=60.0, metadata=_reads(_number(minimum=1.0)))
    """How often the one batched usage query is sent; each period adds to the counters."""
    idle_window_seconds: float = field(default=3600.0, metadata=_reads(_idle_window))
    """A pod counts in gpu_scheduler_idle_gpus once idle over this whole window."""
    idle_usage_threshold_percent: float = field(default=5.0, metadata=_reads(_threshold_percent))
    """Usage strictly below this, on every GPU of the pod, over the idle window, is idle."""


def _host(value: object) -> str:
    """A host name or IP address to listen on (IPv6 without brackets); "" is all interfaces."""
    if value == "":
        return ""
    if isinstance(value, str):
        try:
            ipaddress.ip_address(value)
            return value
        except ValueError:
            if _HOSTNAME.fullmatch(value):
                return value
    raise _Invalid(f"must be a host name or IP address, got {_show(value)}")


@dataclass(frozen=True, slots=True)
class WebhooksConfig:
    """Admission webhooks (kopf's webhook server in this process); see docs/operations.md."""

    enabled: bool = field(default=False, metadata=_reads(_boolean))
    """Serve the validating (PriorityClass reclaim annotations) and mutating (schedulerName of
    GPU pods) webhooks. Every replica serves them, leader or not."""
    address: str = field(default="0.0.0.0", metadata=_reads(_host))
    """Host name or IP address the HTTPS server listens on ("" or 0.0.0.0: all interfaces)."""
    port: int = field(default=9443, metadata=_reads(_integer(0, 65535)))
    """Port of the HTTPS server; 0 picks a free port (tests)."""
    cert_dir: Path | None = field(default=None, metadata=_reads(_optional_path))
    """Folder of a mounted `kubernetes.io/tls` Secret (tls.crt, tls.key, optional ca.crt), re-read
    when the files change; null: a self-signed certificate is made at start."""

    def __post_init__(self) -> None:
        _check_settings(self)


@dataclass(frozen=True, slots=True)
class PreemptionConfig:
    """Priority preemption (kube-scheduler's DefaultPreemption), the PostFilter's second step
    after idle reclaim; see docs/reclaim.md."""

    enabled: bool = field(default=True, metadata=_reads(_boolean))
    """true (the default, as in kube-scheduler): a pod that fits nowhere, and for which idle
    reclaim made no room, may evict pods of strictly lower priority; false: it never does."""

    def __post_init__(self) -> None:
        _check_settings(self)


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """The whole configuration of one `gpu-scheduler run` process."""

    scheduler_name: str = field(default="gpu-scheduler", metadata=_reads(_dns_subdomain))
    """Pods whose spec.schedulerName equals this are ours; a DNS-1123 subdomain."""
    kubeconfig: Path | None = field(default=None, metadata=_reads(_optional_path))
    """Kubeconfig file to reach the API server; null uses the in-cluster service account.
    The KUBECONFIG environment variable is not consulted."""
    log_level: str = field(default="info", metadata=_reads(_log_level))
    """Least severe log level written: debug, info, warning or error."""
    metrics_address: str = field(default="0.0.0.0:10261", metadata=_reads(_host_port))
    """host:port of the /metrics, /healthz and /readyz server ([::]:port for IPv6)."""
    scoring: ScoringConfig = field(default_factory=ScoringConfig, metadata=_nested(ScoringConfig))
    """Node ranking."""
    binding: BindingConfig = field(default_factory=BindingConfig, metadata=_nested(BindingConfig))
    """The binding cycle."""
    backoff: BackoffConfig = field(default_factory=BackoffConfig, metadata=_nested(BackoffConfig))
    """Per-pod retry backoff."""
    queue: QueueConfig = field(default_factory=QueueConfig, metadata=_nested(QueueConfig))
    """The scheduling queue."""
    leader_election: LeaderElectionConfig = field(
        default_factory=LeaderElectionConfig, metadata=_nested(LeaderElectionConfig)
    )
    """Leader election."""
    reclaim: ReclaimConfig = field(default_factory=ReclaimConfig, metadata=_nested(ReclaimConfig))
    """Reclaim of idle GPUs when a pod fits nowhere."""
    accounting: AccountingConfig = field(
        default_factory=AccountingConfig, metadata=_nested(AccountingConfig)
    )
    """GPU time accounting and the idle GPU gauge."""
    webhooks: WebhooksConfig = field(
        default_factory=lambda: WebhooksConfig(), metadata=_nested(WebhooksConfig)
    )
    """Admission webhooks served by every replica (see docs/operations.md)."""
    preemption: PreemptionConfig = field(
        default_factory=PreemptionConfig, metadata=_nested(PreemptionConfig)
    )
    """Priority preemption when a pod fits nowhere and idle reclaim made no room."""
    # Further sections go here; the loader, overrides and unknown-key checks pick them up.

    def __post_init__(self) -> None:
        _check_settings(self)
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
            f"({_fmt(budget)}) with leader election on (writes are cut off at the renew deadline), "
            f"got {_fmt(binding.timeout_seconds)}",
            related=("leaderElection.renewDeadlineSeconds", "leaderElection.retryPeriodSeconds"),
        )


# --- environment and flags ------------------------------------------------------------------


def _env_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise _Invalid(f"must be true or false, got {text!r}")


ENV_OVERRIDES: Final[Mapping[str, tuple[str, Callable[[str], object]]]] = {
    "GPU_SCHEDULER_SCHEDULER_NAME": ("schedulerName", str),
    "GPU_SCHEDULER_KUBECONFIG": ("kubeconfig", str),
    "GPU_SCHEDULER_LOG_LEVEL": ("logLevel", str),
    "GPU_SCHEDULER_METRICS_ADDRESS": ("metricsAddress", str),
    "GPU_SCHEDULER_LEADER_ELECT": ("leaderElection.enabled", _env_bool),
    "GPU_SCHEDULER_LEASE_NAMESPACE": ("leaderElection.leaseNamespace", str),
}
"""Environment variable -> (key path, parser of its text). Empty values are ignored."""


@dataclass(frozen=True, slots=True)
class _Flag:
    option: str
    key: str
    help: str
    boolean: bool = False

    @property
    def dest(self) -> str:
        return self.option.removeprefix("--").replace("-", "_")


FLAGS: Final = (
    _Flag("--kubeconfig", "kubeconfig", "kubeconfig file (default: in-cluster configuration)"),
    _Flag("--scheduler-name", "schedulerName", "schedule pods with this spec.schedulerName"),
    _Flag("--log-level", "logLevel", "one of " + ", ".join(LOG_LEVELS)),
    _Flag("--metrics-address", "metricsAddress", "host:port of the metrics and health server"),
    _Flag("--leader-elect", "leaderElection.enabled", "compete for the leader Lease", True),
    _Flag("--lease-namespace", "leaderElection.leaseNamespace", "namespace of the leader Lease"),
)
"""Command-line flags and the keys they override; every flag defaults to "not given"."""

_FLAG_BY_KEY: Final = {flag.key: flag for flag in FLAGS}


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    """Add `--config` and the override flags of `FLAGS` to `parser` (all default to None)."""
    parser.add_argument(
        "--config", type=Path, default=None, metavar="FILE", help="YAML configuration file"
    )
    for flag in FLAGS:
        if flag.boolean:
            parser.add_argument(
                flag.option,
                dest=flag.dest,
                action=argparse.BooleanOptionalAction,
                default=None,
                help=flag.help,
            )
        else:
            parser.add_argument(flag.option, dest=flag.dest, default=None, help=flag.help)


def config_from_args(args: argparse.Namespace, env: Mapping[str, str]) -> SchedulerConfig:
    """The configuration for parsed `args` (from a parser given `add_config_flags`) and `env`."""
    overrides = {
        flag.key: value for flag in FLAGS if (value := getattr(args, flag.dest, None)) is not None
    }
    return load_config(getattr(args, "config", None), env, overrides)


# --- loading ----------------------------------------------------------------------------------

_Values = dict[str, tuple[object, str]]
"""Key path -> (raw value, source) after layering."""


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _unknown(key: str, known: list[str]) -> str:
    """The unknown-key reason: the closest known key as a suggestion, else all known keys. The
    key is echoed cut to `ECHO_LIMIT` characters (a key can be any size)."""
    guess = None
    if len(key) <= ECHO_LIMIT:  # no key that long is close to a known one
        folded = {name.lower(): name for name in known}
        guess = folded.get(camel(key).lower())
        if guess is None:
            close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
            guess = close[0] if close else None
    if guess is not None:
        return f"unknown key {quote(key, ECHO_LIMIT)}; did you mean {guess!r}?"
    return f"unknown key {quote(key, ECHO_LIMIT)} (known: {', '.join(sorted(known))})"


def _flatten(data: object, cls: type[Any], path: str, source: str, out: _Values) -> None:
    """Check the structure of `data` against `cls` and record each setting's raw value."""
    if data is None:
        return
    if not isinstance(data, Mapping):
        raise ConfigError(path, f"must be a mapping, got {_show(data)}", source)
    specs = {camel(spec.name): spec for spec in dataclasses.fields(cls)}
    for key, value in data.items():
        if not isinstance(key, str):
            raise ConfigError(path, f"keys must be strings, got {_show(key)}", source)
        full = _join(path, clip(key, ECHO_LIMIT))
        spec = specs.get(key)
        if spec is None:
            raise ConfigError(full, _unknown(key, list(specs)), source)
        section = spec.metadata.get(_SECTION)
        if section is not None:
            _flatten(value, section, full, source, out)
        else:
            out[full] = (value, source)


def setting_keys(cls: type[Any] = SchedulerConfig, path: str = "") -> Iterator[str]:
    """Every setting's key path under `cls`, depth first in declaration order."""
    for spec in dataclasses.fields(cls):
        full = _join(path, camel(spec.name))
        section = spec.metadata.get(_SECTION)
        if section is not None:
            yield from setting_keys(section, full)
        else:
            yield full


def config_to_data(config: object) -> dict[str, object]:
    """`config` (any section of the tree) as a YAML-ready mapping with camelCase keys.

    The inverse of loading: `config_from_data(config_to_data(c))` equals `c`. Paths become
    strings; every setting is present, defaults included.
    """
    data: dict[str, object] = {}
    for spec in dataclasses.fields(config):  # type: ignore[arg-type]
        value = getattr(config, spec.name)
        if dataclasses.is_dataclass(value):
            data[camel(spec.name)] = config_to_data(value)
        else:
            data[camel(spec.name)] = str(value) if isinstance(value, Path) else value
    return data


def _blame(error: ConfigError, path: str, values: _Values) -> ConfigError:
    """Prefix an invariant's error with its section path and the source of a key involved."""
    key = _join(path, error.key)
    if key in values:
        return ConfigError(key, error.reason, values[key][1])
    for related in error.related:
        if (full := _join(path, related)) in values:
            return ConfigError(key, f"{error.reason} (the default)", values[full][1])
    return ConfigError(key, error.reason, DEFAULT_SOURCE)


def _foreign(error: ValueError, cls: type[Any], path: str, values: _Values) -> ConfigError:
    """A section class's own `ValueError` with field names as keys, blamed on a key that was set."""
    original = str(error)
    found = {
        spec.name: match.start()
        for spec in dataclasses.fields(cls)
        if (match := re.search(rf"\b{spec.name}\b", original))
    }
    reason = original
    for name in found:
        reason = re.sub(rf"\b{name}\b", camel(name), reason)
    for name in sorted(found, key=found.__getitem__):
        if (key := _join(path, camel(name))) in values:
            return ConfigError(key, reason, values[key][1])
    return ConfigError(path, reason, DEFAULT_SOURCE)


def _build(
    cls: type[T], path: str, values: _Values, leaf_reader: Callable[[str], Reader] | None = None
) -> T:
    kwargs: dict[str, Any] = {}
    for spec in dataclasses.fields(cls):  # type: ignore[arg-type]
        key = _join(path, camel(spec.name))
        section = spec.metadata.get(_SECTION)
        if section is not None:
            kwargs[spec.name] = _build(section, key, values, spec.metadata.get(_LEAF_READER))
            continue
        if key not in values:
            continue
        raw, source = values[key]
        reader = spec.metadata.get(_READER)
        if reader is None:
            assert leaf_reader is not None, f"{cls.__name__}.{spec.name} has no reader"
            reader = leaf_reader(spec.name)
        try:
            kwargs[spec.name] = reader(raw)
        except _Invalid as error:
            raise ConfigError(key, str(error), source) from None
    try:
        return cls(**kwargs)
    except ConfigError as error:
        raise _blame(error, path, values) from None
    except ValueError as error:
        raise _foreign(error, cls, path, values) from None


def _env_values(env: Mapping[str, str], out: _Values) -> None:
    for variable, (key, parse) in ENV_OVERRIDES.items():
        text = env.get(variable, "")
        if not text:
            continue
        try:
            out[key] = (parse(text), variable)
        except _Invalid as error:
            raise ConfigError(key, str(error), variable) from None


def _override_values(overrides: Mapping[str, object], out: _Values) -> None:
    known = list(setting_keys())
    for key, value in overrides.items():
        flag = _FLAG_BY_KEY.get(key)
        source = flag.option if flag else OVERRIDE_SOURCE
        if key not in known:
            raise ConfigError(key, _unknown(key, known), source)
        if value is not None:
            out[key] = (value, source)


def config_from_data(
    data: object,
    source: str = "<data>",
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, object] | None = None,
) -> SchedulerConfig:
    """The configuration for an already parsed YAML document `data` (None = empty document).

    `source` names the document in error messages. Environment and overrides layer on top as in
    `load_config`. Raises `ConfigError` for every invalid input and nothing else.
    """
    env = env or {}
    values: _Values = {}
    _flatten(data, SchedulerConfig, "", source, values)
    _env_values(env, values)
    _override_values(overrides or {}, values)
    identity_key = "leaderElection.identity"
    if identity_key not in values:
        origin = "POD_NAME" if env.get("POD_NAME") else DEFAULT_SOURCE
        values[identity_key] = (default_identity(env), origin)
    return _build(SchedulerConfig, "", values)


def load_config(
    path: Path | None, env: Mapping[str, str], overrides: Mapping[str, object]
) -> SchedulerConfig:
    """Defaults, then the YAML file at `path` (None: no file), then `env`, then `overrides`.

    `overrides` maps key paths (`"leaderElection.enabled"`) to values of the setting's type; None
    values mean "not given". `env` is consulted only for `ENV_OVERRIDES` and `POD_NAME`. Raises
    `ConfigError` (never another exception) naming the file, variable or flag and the key path.
    """
    data: object = None
    source = DEFAULT_SOURCE
    if path is not None:
        source = str(path)
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as error:
            raise ConfigError("", f"cannot read: {error.strerror or error}", source) from None
        except UnicodeDecodeError:
            raise ConfigError("", "not UTF-8 text", source) from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as error:
            raise ConfigError("", f"not valid YAML: {error}", source) from None
        except (ValueError, TypeError, OverflowError, RecursionError) as error:
            raise ConfigError("", f"not a valid YAML value: {error}", source) from None
    return config_from_data(data, source, env, overrides)
