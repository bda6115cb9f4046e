"""The daemon's settings, validated: one frozen dataclass per section, built from defaults, one
YAML file, environment overrides and command-line flags. The package imports nothing else from
`scheduler` (only `topology`, the standard library and yaml), so every layer may use it.

Layers, later wins key by key:

1. defaults: the dataclasses of the section modules (`SchedulerConfig` at the top);
2. the YAML file of `gpu-scheduler run --config FILE`, camelCase keys as in Kubernetes component
   configs (`leaderElection.leaseDurationSeconds`);
3. environment variables `GPU_SCHEDULER_*` (`ENV_OVERRIDES`; empty values are ignored);
4. command-line flags (`add_config_flags`), or any `overrides` passed to `load_config`.

Everything is validated once, at start. Every problem is a `ConfigError` whose message starts with
where the value came from and its key path, e.g.
`config.yaml: leaderElection.leaseDurationSeconds: must be an integer > renewDeadlineSeconds (10),
got 5`; `.key` holds the path. Unknown keys are errors too, with a "did you mean" suggestion.

Shape: a tree of frozen dataclasses. A *section* is a field with `metadata=nested(cls)`; a
*setting* is a field with `metadata=reads(reader)`, where the reader converts one raw value (ints
to floats, strings to paths) or raises `Invalid` with a reason. The loader walks the tree
generically, so adding a section (the reclaim policy's, for one) means writing its dataclass and
adding one section field to `SchedulerConfig`; until then its keys are rejected as unknown.
Invariants between settings of one section live in that section's `__post_init__`, which also
re-checks every setting, so a configuration built in code is held to the same rules as one read
from a file.

Modules, each importing only modules listed above it:

- `scheduler.config.errors`: `ConfigError`, and `Invalid`, a reader's rejection of one value;
- `scheduler.config.readers`: the readers of single values (numbers, durations, names, paths,
  addresses) and `split_host_port`;
- `scheduler.config.tree`: the field metadata of settings and sections (`reads`, `nested`), the
  YAML key of a field (`camel`) and `check_settings`, which every `__post_init__` runs;
- the sections: `scheduler.config.scoring`, `.binding`, `.queue` (backoff and queue),
  `.leader_election`, `.metrics_serving` (TLS and access of the metrics server), `.reclaim`
  (reclaim, accounting and preemption), `.webhooks`, `.dra` (Dynamic Resource Allocation),
  `.sharing` (time-sliced and MPS GPUs), `.health` (GPUs reported sick) and `.allocation`
  (GPU indices corrected from dcgm-exporter);
- `scheduler.config.root`: `SchedulerConfig`, the top-level settings and the invariant between
  sections;
- `scheduler.config.flags`: the environment variables and command-line flags;
- `scheduler.config.loading`: layering, building and validating the tree (`load_config`,
  `config_from_data`, `config_from_args`), `config_to_data` and `setting_keys`.

Import the names below from `scheduler.config` itself.
"""

from scheduler.config.allocation import AllocationTrackingConfig
from scheduler.config.binding import BindingConfig
from scheduler.config.dra import DraSettings
from scheduler.config.errors import ConfigError
from scheduler.config.flags import ENV_OVERRIDES, FLAGS, add_config_flags
from scheduler.config.health import HealthConfig
from scheduler.config.leader_election import LeaderElectionConfig, default_identity
from scheduler.config.loading import (
    DEFAULT_SOURCE,
    OVERRIDE_SOURCE,
    config_from_args,
    config_from_data,
    config_to_data,
    load_config,
    setting_keys,
)
from scheduler.config.metrics_serving import MetricsServingConfig
from scheduler.config.queue import BackoffConfig, QueueConfig
from scheduler.config.readers import ECHO_LIMIT, LOG_LEVELS, Reader, split_host_port
from scheduler.config.reclaim import (
    MAX_IDLE_WINDOW_SECONDS,
    RECLAIM_MODES,
    AccountingConfig,
    PreemptionConfig,
    ReclaimConfig,
)
from scheduler.config.root import SchedulerConfig
from scheduler.config.scoring import ScoringConfig
from scheduler.config.sharing import SharingConfig
from scheduler.config.tree import camel
from scheduler.config.webhooks import WebhooksConfig

__all__ = [
    "DEFAULT_SOURCE",
    "ECHO_LIMIT",
    "ENV_OVERRIDES",
    "FLAGS",
    "LOG_LEVELS",
    "MAX_IDLE_WINDOW_SECONDS",
    "OVERRIDE_SOURCE",
    "RECLAIM_MODES",
    "AccountingConfig",
    "AllocationTrackingConfig",
    "BackoffConfig",
    "BindingConfig",
    "ConfigError",
    "DraSettings",
    "HealthConfig",
    "LeaderElectionConfig",
    "MetricsServingConfig",
    "PreemptionConfig",
    "QueueConfig",
    "Reader",
    "ReclaimConfig",
    "SchedulerConfig",
    "ScoringConfig",
    "SharingConfig",
    "WebhooksConfig",
    "add_config_flags",
    "camel",
    "config_from_args",
    "config_from_data",
    "config_to_data",
    "default_identity",
    "load_config",
    "setting_keys",
    "split_host_port",
]
