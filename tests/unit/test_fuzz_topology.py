"""Fuzz the topology text parsers: `nvidia-smi topo -m`, NVLink domains, MIG profiles and
counts. Only `TopologyError` (and `ValueError` where documented), with bounded messages."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tests.datasets import H200_DIR
from tests.fuzzing import FUZZ, bounded, huge, json_values
from topology.discover import discover_domains, parse_topology
from topology.domains import TopologyError
from topology.mig import MIG_RESOURCE_PREFIX, mig_arrays, parse_mig_profile

LINKS = ("X", "NV1", "NV4", "NV12", "NV18", "SYS", "NODE", "PHB", "PXB", "PIX", "PSB", "N/A")
REAL_TOPO = (H200_DIR / "nvidia-smi-topo.txt").read_text()


@st.composite
def topo_matrices(draw: st.DrawFn) -> str:
    """Matrices near the real grammar: some GPUs and NICs, random link cells, random breakage."""
    gpus = draw(st.integers(min_value=0, max_value=10))
    nics = draw(st.integers(min_value=0, max_value=2))
    devices = [f"GPU{i}" for i in range(gpus)] + [f"NIC{i}" for i in range(nics)]
    if draw(st.booleans()) and devices:
        devices[draw(st.integers(0, len(devices) - 1))] = draw(st.text(max_size=8))
    separator = draw(st.sampled_from(["\t", "  ", " \t "]))
    lines = [separator + separator.join([*devices, "CPU Affinity", "NUMA Affinity"])]
    for row in devices:
        cells = [draw(st.sampled_from(LINKS)) for _ in devices]
        lines.append(separator.join([row, *cells, "0-15", "0"]))
    if draw(st.booleans()):
        lines.append(draw(st.text(max_size=40)))
    lines += ["", "Legend:", "  X    = Self"]
    text = "\n".join(lines)
    if draw(st.booleans()):
        cut = draw(st.integers(0, len(text)))
        text = text[:cut] + draw(st.text(max_size=20)) + text[cut:]
    return text


topo_texts = st.one_of(
    topo_matrices(),
    st.text(max_size=300),
    huge(st.text(alphabet="GPU0123X NV\t\n-", min_size=1, max_size=12)),
    huge(st.sampled_from(REAL_TOPO.splitlines(keepends=True)), max_repeat=2000),
    st.just(REAL_TOPO),
)


@FUZZ
@given(topo_texts)
def test_fuzz_nvidia_smi_topo(text: str) -> None:
    try:
        topology = parse_topology(text)
    except TopologyError as error:
        assert bounded(error), len(str(error))
    else:
        assert sum(topology.domain_sizes) == topology.gpu_count
    try:
        discover_domains(text)
    except TopologyError as error:
        assert bounded(error), len(str(error))


mig_keys = st.one_of(
    st.builds(
        lambda body: MIG_RESOURCE_PREFIX + body,
        st.one_of(
            st.from_regex(
                r"[0-9]{1,6}g\.[0-9]{1,6}gb(\+[a-z]{1,5}(\.[a-z]{1,4})?|-me)?", fullmatch=True
            ),
            st.text(max_size=30),
            huge(st.text(min_size=1, max_size=6)),
        ),
    ),
    st.text(max_size=40),
)


@FUZZ
@given(mig_keys)
def test_fuzz_mig_profile(key: str) -> None:
    try:
        profile = parse_mig_profile(key)
    except TopologyError as error:
        assert bounded(error), len(str(error))
    else:
        assert parse_mig_profile(profile.resource_key) == profile


@FUZZ
@given(
    st.lists(
        st.dictionaries(mig_keys, json_values(max_repeat=100), max_size=4), min_size=0, max_size=4
    ),
    st.data(),
)
def test_fuzz_mig_arrays(capacities: list[dict[str, Any]], data: st.DataObject) -> None:
    requested = [
        data.draw(st.dictionaries(mig_keys, json_values(max_repeat=100), max_size=3))
        for _ in capacities
    ]
    try:
        arrays = mig_arrays(capacities, requested)
    except TopologyError as error:
        assert bounded(error), len(str(error))
    else:
        assert arrays.free.shape == arrays.capacity.shape == (len(capacities), len(arrays.profiles))
        assert (arrays.free >= 0).all()
