"""Start-up rule tying write timeouts to the Lease: a bind must fit in a healthy term."""

from __future__ import annotations

import pytest

from scheduler.config import ConfigError, config_from_data


def error_of(data: object) -> ConfigError:
    with pytest.raises(ConfigError) as raised:
        config_from_data(data, "config.yaml")
    return raised.value


def test_defaults_fit() -> None:
    config = config_from_data(None)
    election = config.leader_election
    budget = election.renew_deadline_seconds - election.retry_period_seconds
    assert config.binding.timeout_seconds <= budget


def test_a_bind_timeout_longer_than_a_healthy_term_leaves_is_rejected() -> None:
    error = error_of({"binding": {"timeoutSeconds": 9}})  # 10 - 2 = 8
    assert error.key == "binding.timeoutSeconds"
    assert str(error) == (
        "config.yaml: binding.timeoutSeconds: must be <= leaderElection.renewDeadlineSeconds - "
        "leaderElection.retryPeriodSeconds (8) with leader election on (writes are cut off at "
        "the renew deadline), got 9"
    )
    assert "\n" not in str(error)


def test_the_limit_itself_is_accepted() -> None:
    config = config_from_data({"binding": {"timeoutSeconds": 8}})
    assert config.binding.timeout_seconds == 8.0


def test_short_leases_blame_the_default_timeout_they_no_longer_fit() -> None:
    error = error_of(
        {
            "leaderElection": {
                "leaseDurationSeconds": 4,
                "renewDeadlineSeconds": 3,
                "retryPeriodSeconds": 0.5,
            }
        }
    )
    assert error.key == "binding.timeoutSeconds"
    assert error.source == "config.yaml"
    assert "(2.5)" in str(error) and str(error).endswith("got 5 (the default)")


def test_without_leader_election_nothing_is_fenced_and_any_timeout_goes() -> None:
    config = config_from_data(
        {"leaderElection": {"enabled": False}, "binding": {"timeoutSeconds": 120}}
    )
    assert config.binding.timeout_seconds == 120.0
