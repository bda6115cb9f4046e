"""Configuration: defaults, layering, validation messages that name their key, fuzzing."""

from __future__ import annotations

import argparse
import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.config import (
    ENV_OVERRIDES,
    FLAGS,
    AllocationTrackingConfig,
    BackoffConfig,
    BindingConfig,
    ConfigError,
    DraSettings,
    LeaderElectionConfig,
    SchedulerConfig,
    add_config_flags,
    camel,
    config_from_args,
    config_from_data,
    config_to_data,
    load_config,
    setting_keys,
)
from topology.scoring import DEFAULT_WEIGHTS, ScoreWeights

DOCS = Path(__file__).parents[2] / "docs" / "configuration.md"

FULL: dict[str, Any] = {
    "schedulerName": "gpu-scheduler-b",
    "kubeconfig": "/etc/gpu-scheduler/kubeconfig",
    "logLevel": "debug",
    "metricsAddress": "[::1]:9100",
    "metricsServing": {
        "secure": True,
        "certFile": "/etc/gpu-scheduler/metrics-tls/tls.crt",
        "keyFile": "/etc/gpu-scheduler/metrics-tls/tls.key",
        "authenticationCacheTtlSeconds": 5.0,
        "authorizationAllowedCacheTtlSeconds": 30.0,
        "authorizationDeniedCacheTtlSeconds": 0.0,
    },
    "scoring": {
        "weights": {
            camel(spec.name): float(getattr(DEFAULT_WEIGHTS, spec.name)) * 0.5
            for spec in dataclasses.fields(ScoreWeights)
        },
        "preferredAffinityWeight": 2.5,
        "fragmentationWeight": 4.0,
        "narrowToOneDomain": False,
        "packGangMembers": False,
        "seed": 42,
    },
    "binding": {"concurrency": 4, "timeoutSeconds": 12.5, "qps": 75.0, "burst": 150},
    "backoff": {"initialSeconds": 0.5, "maxSeconds": 30.0},
    "queue": {"unschedulableFlushSeconds": 300.0, "popFromBackoff": False},
    "leaderElection": {
        "enabled": False,
        "leaseName": "gpu-scheduler-b",
        "leaseNamespace": "gpu-system",
        "leaseDurationSeconds": 30,
        "renewDeadlineSeconds": 20.0,
        "retryPeriodSeconds": 4.0,
        "identity": "replica-1",
    },
    "reclaim": {
        "mode": "dry-run",
        "cooldownSeconds": 45.0,
        "prometheusUrl": "http://prometheus.monitoring:9090",
        "prometheusTimeoutSeconds": 3.0,
        "scrapeIntervalSeconds": 15.0,
        "minCoverage": 0.9,
        "namespaceLabel": "exported_namespace",
        "podLabel": "exported_pod",
        "powerModels": {"NVIDIA A10": {"idleWatts": 20.0, "maxWatts": 150.0}},
        "reservationSeconds": 120.0,
        "perProcessSharedUsage": True,
    },
    "accounting": {
        "enabled": False,
        "periodSeconds": 30.0,
        "idleWindowSeconds": 7200.0,
        "idleUsageThresholdPercent": 2.5,
    },
    "webhooks": {
        "enabled": True,
        "address": "10.0.0.7",
        "port": 8443,
        "certDir": "/etc/gpu-scheduler/webhook-tls",
    },
    "preemption": {"enabled": False},
    "dra": {
        "nvlinkDomainAttribute": "gpu.nvidia.com/partition8",
        "gpuDrivers": ["gpu.nvidia.com", "gpu.example.com"],
    },
    "sharing": {
        "timeSlicedPlacement": "spread",
        "weight": 5.0,
        "failRequestsGreaterThanOne": True,
    },
    "health": {
        "enabled": False,
        "fatalXids": [48, 79],
        "lookbackSeconds": 300.0,
        "periodSeconds": 15.0,
        "writeDeviceTaintRules": True,
    },
    "allocationTracking": {"enabled": False, "periodSeconds": 60.0},
}


def write(tmp_path: Path, data: object, name: str = "config.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return path


def error_of(data: object, env: dict[str, str] | None = None, **overrides: object) -> ConfigError:
    with pytest.raises(ConfigError) as raised:
        config_from_data(data, "config.yaml", env or {}, {k: v for k, v in overrides.items()})
    return raised.value


# --- defaults -----------------------------------------------------------------------------------


def test_defaults() -> None:
    config = load_config(None, {}, {})
    assert config.scheduler_name == "gpu-scheduler"
    assert config.kubeconfig is None
    assert config.log_level == "info"
    assert (config.metrics_host, config.metrics_port) == ("0.0.0.0", 10261)
    assert config.scoring.weights == DEFAULT_WEIGHTS
    assert (config.scoring.preferred_affinity_weight, config.scoring.seed) == (1.0, 0)
    assert config.binding == BindingConfig(
        concurrency=1000, timeout_seconds=5.0, qps=100.0, burst=200
    )
    assert config.backoff == BackoffConfig(initial_seconds=1.0, max_seconds=10.0)
    assert config.queue.unschedulable_flush_seconds == 60.0
    election = config.leader_election
    assert election.enabled
    assert (election.lease_name, election.lease_namespace) == ("gpu-scheduler", "kube-system")
    assert (
        election.lease_duration_seconds,
        election.renew_deadline_seconds,
        election.retry_period_seconds,
    ) == (15, 10.0, 2.0)
    assert re.fullmatch(r".+_[0-9a-f-]{36}", election.identity)
    assert config == dataclasses.replace(
        SchedulerConfig(),
        leader_election=dataclasses.replace(LeaderElectionConfig(), identity=election.identity),
    )


def test_identities_differ_per_process_unless_pod_name_is_set() -> None:
    first = load_config(None, {}, {}).leader_election.identity
    second = load_config(None, {}, {}).leader_election.identity
    assert first != second
    assert load_config(None, {"POD_NAME": "sched-0"}, {}).leader_election.identity == "sched-0"
    from_file = config_from_data({"leaderElection": {"identity": "x"}}, env={"POD_NAME": "p"})
    assert from_file.leader_election.identity == "x"


def test_empty_file_and_empty_sections_mean_defaults(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, ""), {"POD_NAME": "p"}, {})
    assert config == load_config(None, {"POD_NAME": "p"}, {})
    assert config_from_data({"queue": None}, env={"POD_NAME": "p"}) == config


def test_log_level_is_case_insensitive_and_maps_to_logging() -> None:
    config = config_from_data({"logLevel": "WARNING"})
    assert config.log_level == "warning"
    assert config.logging_level == 30


# --- whole files ----------------------------------------------------------------------------------


def test_full_file_round_trip(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, FULL), {}, {})
    assert config.scheduler_name == "gpu-scheduler-b"
    assert config.kubeconfig == Path("/etc/gpu-scheduler/kubeconfig")
    assert (config.metrics_host, config.metrics_port) == ("::1", 9100)
    assert config.scoring.weights.base == 25.0
    assert config.scoring.weights.node_match_close_ratio == 0.25
    assert config.scoring.seed == 42
    assert config.scoring.narrow_to_one_domain is False
    assert config.scoring.pack_gang_members is False
    assert config.binding == BindingConfig(4, 12.5, 75.0, 150)
    assert config.backoff == BackoffConfig(0.5, 30.0)
    assert config.queue.unschedulable_flush_seconds == 300.0
    assert config.queue.pop_from_backoff is False
    assert config.leader_election == LeaderElectionConfig(
        False, "gpu-scheduler-b", "gpu-system", 30, 20.0, 4.0, "replica-1"
    )
    assert config.allocation_tracking == AllocationTrackingConfig(False, 60.0)
    assert config_to_data(config) == FULL
    again = load_config(write(tmp_path, config_to_data(config), "again.yaml"), {}, {})
    assert again == config


def test_ints_become_floats_where_seconds_are_meant() -> None:
    config = config_from_data({"binding": {"timeoutSeconds": 5}})
    assert isinstance(config.binding.timeout_seconds, float)
    assert BindingConfig(timeout_seconds=5).timeout_seconds == 5.0


def test_weights_map_every_score_weights_field() -> None:
    weights = {
        camel(spec.name): index / 100 for index, spec in enumerate(dataclasses.fields(ScoreWeights))
    }
    weights |= {"nodeMatchFairRatio": 0.1, "nodeMatchCloseRatio": 0.2}
    weights |= {"utilLowThreshold": 0.3, "utilGoodThreshold": 0.4, "utilHighThreshold": 0.5}
    config = config_from_data({"scoring": {"weights": weights}})
    for spec in dataclasses.fields(ScoreWeights):
        assert getattr(config.scoring.weights, spec.name) == weights[camel(spec.name)]
    assert camel("node_match_close_ratio") == "nodeMatchCloseRatio"
    assert camel("single_domain_fit") == "singleDomainFit"


def test_score_weights_own_validation_is_reported_with_camel_case_keys() -> None:
    error = error_of({"scoring": {"weights": {"nodeMatchFairRatio": 0.75}}})
    assert error.key == "scoring.weights.nodeMatchFairRatio"
    assert str(error) == (
        "config.yaml: scoring.weights.nodeMatchFairRatio: "
        "nodeMatchFairRatio must be <= nodeMatchCloseRatio"
    )
    error = error_of({"scoring": {"weights": {"utilHighThreshold": 0.5}}})
    assert error.key == "scoring.weights.utilHighThreshold"
    assert "utilGoodThreshold <= utilHighThreshold" in str(error)


# --- layering -----------------------------------------------------------------------------------


def test_precedence_file_then_env_then_flags(tmp_path: Path) -> None:
    path = write(tmp_path, {"logLevel": "debug", "schedulerName": "from-file"})
    env = {"GPU_SCHEDULER_LOG_LEVEL": "warning", "GPU_SCHEDULER_LEASE_NAMESPACE": "from-env"}
    assert load_config(path, {}, {}).log_level == "debug"
    layered = load_config(path, env, {})
    assert (layered.log_level, layered.scheduler_name) == ("warning", "from-file")
    assert layered.leader_election.lease_namespace == "from-env"
    flagged = load_config(path, env, {"logLevel": "error", "schedulerName": None})
    assert (flagged.log_level, flagged.scheduler_name) == ("error", "from-file")


def test_env_overrides_every_documented_variable() -> None:
    env = {
        "GPU_SCHEDULER_SCHEDULER_NAME": "env-name",
        "GPU_SCHEDULER_KUBECONFIG": "/k/config",
        "GPU_SCHEDULER_LOG_LEVEL": "error",
        "GPU_SCHEDULER_METRICS_ADDRESS": "127.0.0.1:9000",
        "GPU_SCHEDULER_LEADER_ELECT": "False",
        "GPU_SCHEDULER_LEASE_NAMESPACE": "env-ns",
        "GPU_SCHEDULER_METRICS_SECURE": "TRUE",
    }
    assert set(env) == set(ENV_OVERRIDES)
    config = load_config(None, env, {})
    assert config.scheduler_name == "env-name"
    assert config.kubeconfig == Path("/k/config")
    assert config.log_level == "error"
    assert config.metrics_address == "127.0.0.1:9000"
    assert not config.leader_election.enabled
    assert config.leader_election.lease_namespace == "env-ns"
    assert config.metrics_serving.secure


def test_empty_env_values_and_kubeconfig_are_ignored() -> None:
    env = {"GPU_SCHEDULER_LOG_LEVEL": "", "KUBECONFIG": "/home/me/.kube/config"}
    config = config_from_data({"logLevel": "debug"}, env=env)
    assert config.log_level == "debug"
    assert config.kubeconfig is None


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_config_flags(parser)
    return parser.parse_args(argv)


def test_flags_win_over_env_and_file(tmp_path: Path) -> None:
    path = write(tmp_path, {"leaderElection": {"enabled": True, "leaseNamespace": "file-ns"}})
    env = {"GPU_SCHEDULER_LEADER_ELECT": "true", "GPU_SCHEDULER_METRICS_ADDRESS": "1.2.3.4:1"}
    args = parse(
        [
            "--config",
            str(path),
            "--no-leader-elect",
            "--lease-namespace",
            "flag-ns",
            "--scheduler-name",
            "flag-name",
            "--log-level",
            "warning",
            "--kubeconfig",
            "/flag/kubeconfig",
        ]
    )
    config = config_from_args(args, env)
    assert not config.leader_election.enabled
    assert config.leader_election.lease_namespace == "flag-ns"
    assert config.scheduler_name == "flag-name"
    assert config.log_level == "warning"
    assert config.kubeconfig == Path("/flag/kubeconfig")
    assert config.metrics_address == "1.2.3.4:1"  # no flag given: the environment's value


def test_flags_not_given_change_nothing() -> None:
    args = parse([])
    assert args.config is None
    assert all(getattr(args, flag.dest) is None for flag in FLAGS)
    assert config_from_args(args, {"POD_NAME": "p"}) == load_config(None, {"POD_NAME": "p"}, {})
    assert config_from_args(parse(["--leader-elect"]), {}).leader_election.enabled
    assert config_from_args(parse(["--metrics-secure"]), {}).metrics_serving.secure
    secure_env = {"GPU_SCHEDULER_METRICS_SECURE": "true"}
    assert not config_from_args(parse(["--no-metrics-secure"]), secure_env).metrics_serving.secure


# --- errors name their key --------------------------------------------------------------------

INVALID: list[tuple[dict[str, Any], str]] = [
    ({"schedulerName": "GPU_Scheduler"}, "schedulerName"),
    ({"schedulerName": ""}, "schedulerName"),
    ({"schedulerName": 7}, "schedulerName"),
    ({"kubeconfig": ""}, "kubeconfig"),
    ({"kubeconfig": ["a"]}, "kubeconfig"),
    ({"logLevel": "verbose"}, "logLevel"),
    ({"metricsAddress": "10261"}, "metricsAddress"),
    ({"metricsAddress": "0.0.0.0:0"}, "metricsAddress"),
    ({"metricsAddress": "0.0.0.0:65536"}, "metricsAddress"),
    ({"metricsAddress": ":-1"}, "metricsAddress"),
    ({"metricsAddress": "::1:80"}, "metricsAddress"),
    ({"metricsAddress": "[nope]:80"}, "metricsAddress"),
    ({"metricsAddress": "a b:80"}, "metricsAddress"),
    ({"scoring": {"weights": {"base": "high"}}}, "scoring.weights.base"),
    ({"scoring": {"weights": {"utilLow": float("nan")}}}, "scoring.weights.utilLow"),
    ({"scoring": {"weights": {"utilLowThreshold": -0.1}}}, "scoring.weights.utilLowThreshold"),
    ({"scoring": {"weights": {"nodeMatchCloseRatio": 1.5}}}, "scoring.weights.nodeMatchCloseRatio"),
    ({"scoring": {"weights": []}}, "scoring.weights"),
    ({"scoring": {"preferredAffinityWeight": -1}}, "scoring.preferredAffinityWeight"),
    ({"scoring": {"preferredAffinityWeight": True}}, "scoring.preferredAffinityWeight"),
    ({"scoring": {"seed": -1}}, "scoring.seed"),
    ({"scoring": {"seed": 1.5}}, "scoring.seed"),
    ({"binding": {"concurrency": 0}}, "binding.concurrency"),
    ({"binding": {"concurrency": True}}, "binding.concurrency"),
    ({"binding": {"timeoutSeconds": 0}}, "binding.timeoutSeconds"),
    ({"binding": {"timeoutSeconds": float("inf")}}, "binding.timeoutSeconds"),
    ({"binding": {"timeoutSeconds": 10**400}}, "binding.timeoutSeconds"),
    ({"backoff": {"initialSeconds": -1}}, "backoff.initialSeconds"),
    ({"backoff": {"initialSeconds": 5, "maxSeconds": 2}}, "backoff.maxSeconds"),
    ({"queue": {"unschedulableFlushSeconds": "1m"}}, "queue.unschedulableFlushSeconds"),
    ({"queue": 5}, "queue"),
    ({"leaderElection": {"enabled": "yes please"}}, "leaderElection.enabled"),
    ({"leaderElection": {"leaseName": "Lease"}}, "leaderElection.leaseName"),
    ({"leaderElection": {"leaseNamespace": "a.b"}}, "leaderElection.leaseNamespace"),
    ({"leaderElection": {"leaseDurationSeconds": 15.5}}, "leaderElection.leaseDurationSeconds"),
    ({"leaderElection": {"leaseDurationSeconds": 5}}, "leaderElection.leaseDurationSeconds"),
    ({"leaderElection": {"renewDeadlineSeconds": 1}}, "leaderElection.renewDeadlineSeconds"),
    ({"leaderElection": {"retryPeriodSeconds": 0}}, "leaderElection.retryPeriodSeconds"),
    ({"leaderElection": {"identity": ""}}, "leaderElection.identity"),
    ({"leaderElection": {"identity": None}}, "leaderElection.identity"),
    ({"allocationTracking": {"enabled": "sometimes"}}, "allocationTracking.enabled"),
    ({"allocationTracking": {"periodSeconds": 0.5}}, "allocationTracking.periodSeconds"),
    ({"allocationTracking": {"periodSeconds": "30s"}}, "allocationTracking.periodSeconds"),
    ({"allocationTracking": []}, "allocationTracking"),
]


@pytest.mark.parametrize(("data", "key"), INVALID, ids=[key for _, key in INVALID])
def test_every_validation_error_names_its_key(data: dict[str, Any], key: str) -> None:
    error = error_of(data)
    assert error.key == key
    assert str(error).startswith(f"config.yaml: {key}: ")


def test_invariant_message_names_both_keys_and_values(tmp_path: Path) -> None:
    path = write(tmp_path, {"leaderElection": {"leaseDurationSeconds": 5}})
    with pytest.raises(ConfigError) as raised:
        load_config(path, {}, {})
    assert str(raised.value) == (
        f"{path}: leaderElection.leaseDurationSeconds: "
        "must be an integer > renewDeadlineSeconds (10), got 5"
    )


def test_invariant_broken_by_one_set_key_blames_its_source_and_marks_the_default() -> None:
    error = error_of({"leaderElection": {"renewDeadlineSeconds": 20}})
    assert str(error) == (
        "config.yaml: leaderElection.leaseDurationSeconds: "
        "must be an integer > renewDeadlineSeconds (20), got 15 (the default)"
    )
    error = error_of({}, {}, **{"backoff.initialSeconds": 11})
    assert str(error) == (
        "override: backoff.maxSeconds: must be >= initialSeconds (11), got 10 (the default)"
    )


def test_configs_built_in_code_are_validated_too() -> None:
    with pytest.raises(ConfigError) as raised:
        LeaderElectionConfig(lease_duration_seconds=3, renew_deadline_seconds=3, identity="x")
    assert raised.value.key == "leaseDurationSeconds"
    with pytest.raises(ConfigError) as raised:
        BindingConfig(concurrency=0)
    assert raised.value.key == "concurrency"
    with pytest.raises(ConfigError) as raised:
        SchedulerConfig(scheduler_name="Nope")
    assert raised.value.key == "schedulerName"


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("GPU_SCHEDULER_LEADER_ELECT", "maybe"),
        ("GPU_SCHEDULER_LEADER_ELECT", "1"),
        ("GPU_SCHEDULER_LOG_LEVEL", "loud"),
        ("GPU_SCHEDULER_METRICS_ADDRESS", "localhost"),
        ("GPU_SCHEDULER_SCHEDULER_NAME", "Not_A_Name"),
        ("GPU_SCHEDULER_LEASE_NAMESPACE", "a.b"),
        ("GPU_SCHEDULER_KUBECONFIG", "   "),
    ],
)
def test_invalid_env_values_name_the_variable(variable: str, value: str) -> None:
    error = error_of({}, {variable: value})
    key = ENV_OVERRIDES[variable][0]
    assert error.key == key
    assert error.source == variable
    assert str(error).startswith(f"{variable}: {key}: ")


def test_invalid_flag_values_name_the_flag() -> None:
    with pytest.raises(ConfigError) as raised:
        config_from_args(parse(["--metrics-address", ":0"]), {})
    assert str(raised.value) == (
        "--metrics-address: metricsAddress: must be host:port (the port must be 1..65535), got ':0'"
    )
    with pytest.raises(ConfigError) as raised:
        config_from_args(parse(["--log-level", "trace"]), {})
    assert raised.value.source == "--log-level"


def test_file_problems(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml", {}, {})
    with pytest.raises(ConfigError, match="not valid YAML") as raised:
        load_config(write(tmp_path, "a: [1, 2"), {}, {})
    assert raised.value.key == ""
    with pytest.raises(ConfigError, match="must be a mapping, got a list"):
        load_config(write(tmp_path, "- 1\n- 2\n"), {}, {})
    with pytest.raises(ConfigError, match="keys must be strings"):
        load_config(write(tmp_path, "1: 2\n"), {}, {})
    with pytest.raises(ConfigError, match="not a valid YAML value"):
        load_config(write(tmp_path, "logLevel: 2020-13-45\n"), {}, {})


# --- unknown keys -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "key", "suggestion"),
    [
        ({"schedulerNmae": "x"}, "schedulerNmae", "schedulerName"),
        ({"scheduler_name": "x"}, "scheduler_name", "schedulerName"),
        ({"leaderElection": {"leaseDuration": 15}}, "leaderElection.leaseDuration", None),
        (
            {"scoring": {"weights": {"singleDomainFitt": 1}}},
            "scoring.weights.singleDomainFitt",
            None,
        ),
        ({"binding": {"Concurrency": 1}}, "binding.Concurrency", "concurrency"),
    ],
)
def test_unknown_keys_are_errors_with_a_suggestion(
    data: dict[str, Any], key: str, suggestion: str | None
) -> None:
    error = error_of(data)
    assert error.key == key
    leaf = key.rsplit(".", 1)[-1]
    expected = (
        suggestion
        or {
            "leaseDuration": "leaseDurationSeconds",
            "singleDomainFitt": "singleDomainFit",
        }[leaf]
    )
    assert str(error) == (f"config.yaml: {key}: unknown key {leaf!r}; did you mean {expected!r}?")


def test_unknown_key_without_a_close_match_lists_the_known_keys() -> None:
    error = error_of({"binding": {"zzz": 1}})
    assert str(error) == (
        "config.yaml: binding.zzz: unknown key 'zzz' "
        "(known: burst, concurrency, qps, timeoutSeconds)"
    )


def test_unknown_top_level_sections_are_errors() -> None:
    error = error_of({"reclaimer": {"mode": "off"}})
    assert error.key == "reclaimer"
    assert "unknown key 'reclaimer'" in str(error)


@pytest.mark.parametrize(
    ("data", "key", "message"),
    [
        ({"mode": "on"}, "reclaim.mode", "one of off, dry-run, enforce"),
        ({"prometheusUrl": "prometheus:9090"}, "reclaim.prometheusUrl", "http(s) URL"),
        ({"podLabel": "exported-pod"}, "reclaim.podLabel", "Prometheus label name"),
        ({"minCoverage": 1.5}, "reclaim.minCoverage", "between 0 and 1"),
        (
            {"powerModels": {"NVIDIA A10": {"idleWatts": 200, "maxWatts": 150}}},
            "reclaim.powerModels",
            "idleWatts < maxWatts",
        ),
    ],
)
def test_reclaim_errors_name_the_key(data: dict[str, object], key: str, message: str) -> None:
    error = error_of({"reclaim": data})
    assert error.key == key
    assert message in str(error)


def test_unknown_override_keys_are_errors() -> None:
    with pytest.raises(ConfigError) as raised:
        load_config(None, {}, {"leaderElection.enable": False})
    assert "did you mean 'leaderElection.enabled'?" in str(raised.value)


# --- documentation --------------------------------------------------------------------------------


def test_docs_list_every_key_and_their_example_loads() -> None:
    text = DOCS.read_text()
    for key in setting_keys():
        leaf = key.rsplit(".", 1)[-1]
        documented = f"`{key}`" in text or (
            key.startswith("scoring.weights.") and f"| `{leaf}` |" in text
        )
        assert documented, key
    for variable in ENV_OVERRIDES:
        assert f"`{variable}`" in text
    for flag in FLAGS:
        assert f"`{flag.option}" in text
    example = text.split("```yaml\n", 1)[1].split("```", 1)[0]
    config = config_from_data(yaml.safe_load(example), "example", {"POD_NAME": "p"})
    assert config.leader_election.lease_namespace == "gpu-scheduler"
    assert config.scoring.weights == DEFAULT_WEIGHTS


# --- fuzz -----------------------------------------------------------------------------------------

KNOWN_KEYS = sorted(
    {part for key in setting_keys() for part in key.split(".")} | {"reclaim", "weights"}
)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(10**500), max_value=10**500)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20)
    | st.sampled_from(["info", "0.0.0.0:80", "[::]:1", "gpu-scheduler", "kube-system", "a_b"])
)
KEYS = st.sampled_from(KNOWN_KEYS) | st.text(max_size=10) | st.integers() | st.none()
YAMLISH = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(KEYS, children, max_size=5),
    max_leaves=20,
)


@settings(max_examples=400, deadline=None)
@given(
    data=YAMLISH,
    env=st.dictionaries(st.sampled_from(sorted(ENV_OVERRIDES)), st.text(max_size=12), max_size=3),
)
def test_fuzz_anything_loads_or_raises_config_error(data: object, env: dict[str, str]) -> None:
    try:
        config = config_from_data(data, "fuzz.yaml", env)
    except ConfigError as error:
        assert str(error)
    else:
        assert isinstance(config, SchedulerConfig)
        assert config_from_data(config_to_data(config), env=env) == config


@settings(max_examples=200, deadline=None)
@given(
    section=st.sampled_from(["binding", "backoff", "queue", "leaderElection", "scoring", "dra"]),
    values=st.dictionaries(st.sampled_from(KNOWN_KEYS), SCALARS, max_size=4),
)
def test_fuzz_sections(section: str, values: dict[str, object]) -> None:
    try:
        config_from_data({section: values}, "fuzz.yaml", {})
    except ConfigError as error:
        assert error.key.startswith(section)


def test_accounting_defaults_and_bounds() -> None:
    accounting = load_config(None, {}, {}).accounting
    assert (accounting.enabled, accounting.period_seconds) == (True, 60.0)
    assert (accounting.idle_window_seconds, accounting.idle_usage_threshold_percent) == (3600, 5)
    too_long = error_of({"accounting": {"idleWindowSeconds": 31 * 86400}})
    assert too_long.key == "accounting.idleWindowSeconds"
    assert "from 1 to 2592000 seconds" in str(too_long)
    short = error_of({"accounting": {"idleWindowSeconds": 0.5}})
    assert short.key == "accounting.idleWindowSeconds"
    for bad in (0, 101, "5"):
        error = error_of({"accounting": {"idleUsageThresholdPercent": bad}})
        assert error.key == "accounting.idleUsageThresholdPercent"
    for bad in (-1, 0.5):
        assert error_of({"accounting": {"periodSeconds": bad}}).key == "accounting.periodSeconds"


# --- webhooks -------------------------------------------------------------------------------------


def test_webhooks_are_off_by_default_and_listen_on_9443() -> None:
    webhooks = config_from_data({}).webhooks
    assert (webhooks.enabled, webhooks.address, webhooks.port, webhooks.cert_dir) == (
        False,
        "0.0.0.0",
        9443,
        None,
    )


def test_webhooks_port_zero_picks_a_free_port_and_certdir_is_a_path() -> None:
    webhooks = config_from_data({"webhooks": {"port": 0, "certDir": "tls", "address": ""}}).webhooks
    assert (webhooks.port, webhooks.cert_dir, webhooks.address) == (0, Path("tls"), "")


@pytest.mark.parametrize(
    ("section", "key", "reason"),
    [
        ({"port": 65536}, "webhooks.port", "must be an integer 0..65535, got 65536"),
        ({"port": True}, "webhooks.port", "must be an integer 0..65535, got True"),
        ({"address": "a b"}, "webhooks.address", "must be a host name or IP address, got 'a b'"),
        ({"address": 7}, "webhooks.address", "must be a host name or IP address, got 7"),
        ({"enabled": "yes"}, "webhooks.enabled", "must be true or false, got 'yes'"),
        ({"certDir": ""}, "webhooks.certDir", "must be a file path or null, got ''"),
    ],
)
def test_bad_webhooks_settings_name_the_key(
    section: dict[str, object], key: str, reason: str
) -> None:
    error = error_of({"webhooks": section})
    assert error.key == key
    assert str(error) == f"config.yaml: {key}: {reason}"


# --- dra ------------------------------------------------------------------------------------------


def test_dra_domain_attribute_is_unset_by_default_and_kept_as_written() -> None:
    assert config_from_data({}).dra == DraSettings(nvlink_domain_attribute="")
    for name in ("gpu.nvidia.com/partition8", "Example.COM/clique_ID", "a/" + "x" * 32):
        dra = config_from_data({"dra": {"nvlinkDomainAttribute": name}}).dra
        assert dra.nvlink_domain_attribute == name


@pytest.mark.parametrize(
    "bad",
    [
        "partition8",  # no domain: not fully qualified
        "/partition8",
        "gpu.nvidia.com/",
        "gpu.nvidia.com/partition-8",  # not a C identifier
        "gpu.nvidia.com/8partition",
        "gpu.nvidia.com/a/b",
        "gpu_nvidia.com/partition8",  # not a DNS subdomain
        "a" * 64 + "/x",
        "a/" + "x" * 33,
        7,
        None,
        ["gpu.nvidia.com/partition8"],
    ],
)
def test_bad_dra_domain_attribute_is_one_error_naming_the_key(bad: object) -> None:
    error = error_of({"dra": {"nvlinkDomainAttribute": bad}})
    assert error.key == "dra.nvlinkDomainAttribute"
    assert str(error).startswith(
        "config.yaml: dra.nvlinkDomainAttribute: must be empty or a fully qualified device "
        "attribute name"
    )
    assert len(str(error)) < 300


def test_dra_gpu_drivers_default_to_nvidia_and_keep_order_without_duplicates() -> None:
    assert config_from_data({}).dra.gpu_drivers == ("gpu.nvidia.com",)
    written = ["gpu.example.com", "gpu.nvidia.com", "gpu.example.com"]
    dra = config_from_data({"dra": {"gpuDrivers": written}}).dra
    assert dra.gpu_drivers == ("gpu.example.com", "gpu.nvidia.com")
    assert config_from_data({"dra": {"gpuDrivers": []}}).dra.gpu_drivers == ()


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        ("gpu.nvidia.com", "must be a list of DRA driver names"),
        ({"gpu.nvidia.com": 1}, "must be a list of DRA driver names"),
        (["GPU.nvidia.com"], "each driver must be a DNS subdomain"),
        (["gpu_nvidia.com"], "each driver must be a DNS subdomain"),
        (["a" * 64], "each driver must be a DNS subdomain"),
        ([""], "each driver must be a DNS subdomain"),
        ([7], "each driver must be a DNS subdomain"),
    ],
)
def test_bad_dra_gpu_drivers_are_one_error_naming_the_key(bad: object, reason: str) -> None:
    error = error_of({"dra": {"gpuDrivers": bad}})
    assert error.key == "dra.gpuDrivers"
    assert str(error).startswith(f"config.yaml: dra.gpuDrivers: {reason}")
    assert len(str(error)) < 400


def test_dra_settings_built_in_code_are_validated() -> None:
    with pytest.raises(ConfigError) as raised:
        DraSettings(nvlink_domain_attribute="partition8")
    assert raised.value.key == "nvlinkDomainAttribute"
