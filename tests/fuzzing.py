"""Shared set-up of the parser fuzz tests (tests/unit/test_fuzz_*.py).

Every fuzz test runs `FUZZ` examples: 200 by default, deterministic (the same examples on every
run, so CI is reproducible), or `GPU_SCHEDULER_FUZZ_EXAMPLES` random examples for a long run:

    GPU_SCHEDULER_FUZZ_EXAMPLES=10000 .venv/bin/python -m pytest tests/unit -k fuzz

The properties: a parser raises nothing but its documented error type, and every message it
gives (exception text, field error, event text) is at most `MAX_MESSAGE` characters, even for
inputs of 100 KB (`huge` builds those from small pieces).
"""

from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

FUZZ_ENV = "GPU_SCHEDULER_FUZZ_EXAMPLES"
DEFAULT_EXAMPLES = 200
MAX_MESSAGE = 1024
"""Longest error message a parser may produce (bytes of text), whatever the input size."""

_long_run = os.environ.get(FUZZ_ENV, "").strip()
FUZZ = settings(
    max_examples=int(_long_run) if _long_run else DEFAULT_EXAMPLES,
    derandomize=not _long_run,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)


def huge(pieces: st.SearchStrategy[str], max_repeat: int = 5000) -> st.SearchStrategy[str]:
    """Strings up to ~100 KB: a generated piece repeated, then a generated tail."""
    return st.builds(
        lambda piece, times, tail: piece * times + tail,
        pieces,
        st.integers(min_value=1, max_value=max_repeat),
        pieces,
    )


def huge_integers() -> st.SearchStrategy[int]:
    """Integers of 4,000 to 6,000 digits (past Python's 4300-digit limit for int <-> str)."""
    return st.builds(lambda digits: 10**digits - 1, st.integers(min_value=4000, max_value=6000))


def json_values(
    leaf_text: st.SearchStrategy[str] | None = None,
    huge_ints: bool = True,
    max_repeat: int = 5000,
) -> st.SearchStrategy[Any]:
    """Random JSON-like values: None, bools, ints (`huge_integers` too unless `huge_ints` is
    False), floats (inf, nan), strings (`huge` ones up to `max_repeat` pieces), lists and
    string-keyed dicts, nested."""
    text = leaf_text if leaf_text is not None else st.text(max_size=30)
    leaves = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.integers(min_value=-(10**30), max_value=10**30),
        huge_integers() if huge_ints else st.nothing(),
        st.floats(),
        text,
        huge(st.text(min_size=1, max_size=5), max_repeat),
    )
    return st.recursive(
        leaves,
        lambda children: st.one_of(
            st.lists(children, max_size=4),
            st.dictionaries(text, children, max_size=4),
        ),
        max_leaves=20,
    )


def bounded(message: object) -> bool:
    return len(str(message)) <= MAX_MESSAGE


def _maybe(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly a well-formed value, sometimes anything JSON-like."""
    return st.one_of(valid, valid, valid, json_values())


quantities = st.one_of(
    st.sampled_from(["0", "1", "2", "8", "500m", "1Gi", "64", "1000000000", "-1", "1e3", "x"]),
    st.integers(min_value=-2, max_value=2**64),
    st.text(max_size=12),
)
resource_names = st.one_of(
    st.sampled_from(
        ["cpu", "memory", "pods", "ephemeral-storage", "nvidia.com/gpu", "nvidia.com/mig-1g.18gb"]
    ),
    st.text(max_size=20),
    huge(st.text(min_size=1, max_size=6)),
)
resource_lists = _maybe(st.dictionaries(resource_names, _maybe(quantities), max_size=5))
annotation_values = st.one_of(
    st.sampled_from(["0-3,4-7", "0,1", "0-7", "preferred", "required", ""]),
    st.text(max_size=30),
    huge(st.text(alphabet="0123456789-, ", min_size=1, max_size=8)),
)
annotations = _maybe(
    st.dictionaries(
        st.sampled_from(
            [
                "gpu-scheduler.io/nvlink-domains",
                "gpu-scheduler.io/gpus",
                "gpu-scheduler.io/nvlink-policy",
                "other",
            ]
        ),
        annotation_values,
        max_size=4,
    )
)
names = _maybe(st.text(alphabet="abcdefgh-0123456789", min_size=1, max_size=12))
containers = _maybe(
    st.fixed_dictionaries(
        {"name": names},
        optional={
            "resources": _maybe(
                st.fixed_dictionaries(
                    {}, optional={"requests": resource_lists, "limits": resource_lists}
                )
            )
        },
    )
)
requirements = _maybe(
    st.fixed_dictionaries(
        {
            "key": _maybe(st.sampled_from(["kubernetes.io/hostname", "gpu", "zone"])),
            "operator": _maybe(
                st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Near"])
            ),
        },
        optional={"values": _maybe(st.lists(st.text(max_size=8), max_size=3))},
    )
)
affinities = _maybe(
    st.fixed_dictionaries(
        {},
        optional={
            "nodeAffinity": _maybe(
                st.fixed_dictionaries(
                    {},
                    optional={
                        "requiredDuringSchedulingIgnoredDuringExecution": _maybe(
                            st.fixed_dictionaries(
                                {
                                    "nodeSelectorTerms": _maybe(
                                        st.lists(
                                            _maybe(
                                                st.fixed_dictionaries(
                                                    {
                                                        "matchExpressions": st.lists(
                                                            requirements, max_size=3
                                                        )
                                                    }
                                                )
                                            ),
                                            max_size=2,
                                        )
                                    )
                                }
                            )
                        ),
                        "preferredDuringSchedulingIgnoredDuringExecution": _maybe(
                            st.lists(
                                _maybe(
                                    st.fixed_dictionaries(
                                        {
                                            "weight": _maybe(st.integers(0, 101)),
                                            "preference": _maybe(
                                                st.fixed_dictionaries(
                                                    {
                                                        "matchExpressions": st.lists(
                                                            requirements, max_size=2
                                                        )
                                                    }
                                                )
                                            ),
                                        }
                                    )
                                ),
                                max_size=2,
                            )
                        ),
                    },
                )
            )
        },
    )
)


def pods() -> st.SearchStrategy[Any]:
    """Pod-shaped JSON with random, often invalid, fields."""
    return st.fixed_dictionaries(
        {
            "kind": st.just("Pod"),
            "metadata": _maybe(
                st.fixed_dictionaries(
                    {"name": names, "namespace": _maybe(st.just("default"))},
                    optional={"annotations": annotations, "uid": names},
                )
            ),
            "spec": _maybe(
                st.fixed_dictionaries(
                    {"containers": _maybe(st.lists(containers, max_size=4))},
                    optional={
                        "initContainers": _maybe(st.lists(containers, max_size=2)),
                        "overhead": resource_lists,
                        "schedulerName": _maybe(st.just("gpu-scheduler")),
                        "nodeName": names,
                        "priority": json_values(),
                        "affinity": affinities,
                        "tolerations": json_values(),
                        "nodeSelector": json_values(),
                    },
                )
            ),
        },
        optional={"status": json_values()},
    )


def nodes() -> st.SearchStrategy[Any]:
    """Node-shaped JSON with random, often invalid, fields."""
    return st.fixed_dictionaries(
        {
            "kind": st.just("Node"),
            "metadata": _maybe(
                st.fixed_dictionaries(
                    {"name": names},
                    optional={"annotations": annotations, "labels": json_values()},
                )
            ),
            "status": _maybe(st.fixed_dictionaries({"allocatable": resource_lists})),
        },
        optional={"spec": json_values()},
    )
