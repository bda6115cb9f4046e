"""Fuzz the offline tools' inputs: `explain --cluster` dumps and the simulator's CSV and YAML
readers. Readers raise only their documented errors with bounded messages; `explain` rows come
out for any objects the reader accepts."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from hypothesis import given
from hypothesis import strategies as st

from scheduler.config import SchedulerConfig
from scheduler.core.profile import default_framework
from scheduler.tools.explain import explain, load_dump
from scheduler.tools.simulate_trace import (
    NODE_COLUMNS,
    POD_COLUMNS,
    TraceError,
    read_nodes,
    read_pods,
)
from tests.fuzzing import FUZZ, bounded, huge, json_values, nodes, pods

FRAMEWORK = default_framework(SchedulerConfig())


@contextmanager
def written(name: str, text: str) -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / name
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        yield path


def tame(data: Any) -> Any:
    """`data` with integers YAML cannot write (over 4300 digits) as their bit length."""
    if isinstance(data, int) and not isinstance(data, bool) and data.bit_length() > 10_000:
        return data.bit_length()
    if isinstance(data, list):
        return [tame(item) for item in data]
    if isinstance(data, dict):
        return {key: tame(value) for key, value in data.items()}
    return data


def dump(data: Any) -> str:
    return yaml.safe_dump(tame(data), allow_unicode=True)


# -- explain --cluster ------------------------------------------------------------------------

cluster_lists = st.builds(
    lambda items: {"apiVersion": "v1", "kind": "List", "items": items},
    st.lists(st.one_of(nodes(), pods()), max_size=3),
)


@FUZZ
@given(st.lists(st.one_of(nodes(), pods()), min_size=1, max_size=5), pods())
def test_fuzz_explain_rows_for_any_objects(
    objects: list[dict[str, Any]], pod: dict[str, Any]
) -> None:
    rows = explain(pod, objects, FRAMEWORK)
    for row in rows:
        assert isinstance(row["feasible"], bool)
        assert all(bounded(reason) for reason in row["reasons"])


# YAML parsing is pure Python: big documents come from `huge` text (up to 40 KB), the
# generated documents stay small.
dump_texts = st.one_of(
    cluster_lists.map(dump),
    json_values(huge_ints=False, max_repeat=100).map(dump),
    st.text(max_size=200),
    huge(st.text(alphabet="-:{}[] \nabc01", min_size=1, max_size=8)),
)


@FUZZ
@given(dump_texts)
def test_fuzz_load_dump(text: str) -> None:
    with written("cluster.yaml", text) as path:
        try:
            objects = load_dump(path)
        except (ValueError, yaml.YAMLError) as error:  # what `explain` reports and exits 2 on
            assert bounded(error), len(str(error))
            return
    assert all(isinstance(obj, dict) for obj in objects)


# -- simulate --nodes/--pods ------------------------------------------------------------------

cells = st.one_of(
    st.sampled_from(["0", "1", "8", "1000", "-1", "", "1.5", "inf", "nan", "1e400", "x", "P100"]),
    st.text(alphabet="0123456789.-e", max_size=8),
    st.text(max_size=10),
)


@st.composite
def csv_texts(draw: st.DrawFn, columns: tuple[str, ...]) -> str:
    header = list(columns)
    if draw(st.booleans()):
        header = draw(st.permutations(header))[: draw(st.integers(1, len(header)))]
    rows = [
        ",".join(draw(cells).replace(",", "").replace("\n", "") for _ in header)
        for _ in range(draw(st.integers(0, 5)))
    ]
    return "\n".join([",".join(header), *rows]) + "\n"


yaml_entries = st.dictionaries(
    st.sampled_from(
        ["name", "cpu", "memory", "gpus", "gpu_product", "nvlink_domains", "gpu_products"]
    ),
    json_values(huge_ints=False, max_repeat=100),
    max_size=7,
)


def check(read: Any, name: str, text: str) -> None:
    with written(name, text) as path:
        try:
            read(path)
        except TraceError as error:
            assert bounded(error), len(str(error))


@FUZZ
@given(st.one_of(csv_texts(NODE_COLUMNS), st.text(max_size=200)))
def test_fuzz_simulate_nodes_csv(text: str) -> None:
    check(read_nodes, "nodes.csv", text)


@FUZZ
@given(st.one_of(csv_texts(POD_COLUMNS), st.text(max_size=200)))
def test_fuzz_simulate_pods_csv(text: str) -> None:
    check(read_pods, "pods.csv", text)


@FUZZ
@given(
    st.one_of(
        st.builds(
            lambda n, p: dump({"nodes": n, "pods": p}),
            st.lists(yaml_entries, max_size=3),
            st.lists(yaml_entries, max_size=3),
        ),
        json_values(huge_ints=False, max_repeat=100).map(dump),
        st.text(max_size=200),
        huge(st.text(alphabet="-:{}[] \nabc01", min_size=1, max_size=8)),
    )
)
def test_fuzz_simulate_yaml(text: str) -> None:
    check(read_nodes, "cluster.yaml", text)
    check(read_pods, "cluster.yaml", text)


# -- cases the fuzzing found, kept as plain regression tests -----------------------------------


def test_load_dump_rejects_what_is_not_a_list_of_objects() -> None:
    for text, problem in (
        ("[" * 5000 + "]" * 5000, "nested too deeply"),
        ("kind: 7\nitems: [1]\n", "an item is a int"),
        ("kind: List\nitems: {a: 1}\n", "items is a dict"),
    ):
        with written("cluster.yaml", text) as path:
            try:
                load_dump(path)
            except ValueError as error:
                assert problem in str(error)
            else:
                raise AssertionError(f"{text[:20]!r} was accepted")


def test_simulate_numbers_that_do_not_fit_are_trace_errors() -> None:
    for cell in ("inf", "1e400", "-inf"):
        with written("nodes.csv", f"sn,cpu_milli,memory_mib,gpu,model\nn1,1,1,{cell},\n") as path:
            try:
                read_nodes(path)
            except TraceError as error:
                assert "gpu" in str(error) and "is not a number" in str(error)
            else:
                raise AssertionError(f"{cell} was accepted")
    with written(
        "c.yaml", "nodes:\n  - {name: n, cpu: 1, memory: 1, gpus: " + "9" * 5000 + "}\n"
    ) as path:
        try:
            read_nodes(path)
        except TraceError as error:
            assert bounded(error)
        else:
            raise AssertionError("a 5000-digit GPU count was accepted")
