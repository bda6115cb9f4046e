"""NVLink domains from `nvidia-smi topo -m`: real output, hand-written matrices, errors, fuzz."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.datasets import DATA_DIR as TEST_DATA
from tests.datasets import H200_DIR
from topology.discover import discover_domains, parse_topology
from topology.domains import TopologyError

DATA_DIR = H200_DIR
TOPOLOGY_SAMPLES = TEST_DATA / "topology"
UNDERLINE, RESET = "\x1b[4m", "\x1b[0m"
AFFINITY_HEADER = ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]

LEGEND = """
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""


def matrix(links: list[list[str]], nics: list[str] | None = None) -> str:
    """`nvidia-smi topo -m` text for GPU links `links[i][j]`, with optional NIC devices.

    NICs see every GPU over PHB; each GPU row gets affinity cells like the real tool prints.
    """
    nic_names = nics or []
    gpus = len(links)
    devices = [f"GPU{i}" for i in range(gpus)] + nic_names
    header = "\t" + UNDERLINE + "\t".join(devices + AFFINITY_HEADER) + RESET
    rows = [header]
    for i, row in enumerate(links):
        cells = [" X " if cell == "X" else cell for cell in row] + ["PHB"] * len(nic_names)
        rows.append("\t".join([f"GPU{i}", *cells, "0-31", "0", "", "N/A"]))
    for k, name in enumerate(nic_names):
        cells = ["PHB"] * gpus + [" X " if j == k else "PIX" for j in range(len(nic_names))]
        rows.append("\t".join([name, *cells]))
    nic_legend = ""
    if nic_names:
        listed = "\n".join(f"  NIC{k}: mlx5_{k}" for k in range(len(nic_names)))
        nic_legend = f"\nNIC Legend:\n\n{listed}\n"
    return "\n".join(rows) + "\n" + LEGEND + nic_legend


def groups_matrix(groups: list[list[int]], nv: str, across: str) -> list[list[str]]:
    """Links where GPUs in the same group are `nv` and others are `across`."""
    gpus = sum(len(group) for group in groups)
    group_of = {gpu: index for index, group in enumerate(groups) for gpu in group}
    return [
        ["X" if i == j else (nv if group_of[i] == group_of[j] else across) for j in range(gpus)]
        for i in range(gpus)
    ]


TWO_GPU_NV18 = (
    "\t\x1b[4mGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
    "GPU0\t X \tNV18\t0-31\t0\t\tN/A\n"
    "GPU1\tNV18\t X \t0-31\t0\t\tN/A\n" + LEGEND
)

FOUR_GPU_TWO_PAIRS = (
    "\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
    "GPU0\t X \tNV4\tSYS\tSYS\t0-15\t0\t\tN/A\n"
    "GPU1\tNV4\t X \tSYS\tSYS\t0-15\t0\t\tN/A\n"
    "GPU2\tSYS\tSYS\t X \tNV4\t16-31\t1\t\tN/A\n"
    "GPU3\tSYS\tSYS\tNV4\t X \t16-31\t1\t\tN/A\n" + LEGEND
)

EIGHT_GPU_TWO_QUADS = matrix(groups_matrix([[0, 1, 2, 3], [4, 5, 6, 7]], "NV12", "SYS"))
EIGHT_GPU_QUADS_NODE = matrix(groups_matrix([[0, 1, 2, 3], [4, 5, 6, 7]], "NV2", "NODE"))
EIGHT_GPU_NVSWITCH = matrix(groups_matrix([list(range(8))], "NV18", "SYS"))
EIGHT_GPU_NVSWITCH_NICS = matrix(
    groups_matrix([list(range(8))], "NV18", "SYS"), nics=["NIC0", "NIC1", "NIC2", "NIC3"]
)
TWO_PAIRS_MLX_NICS = matrix(groups_matrix([[0, 1], [2, 3]], "NV1", "PXB"), nics=["mlx5_0"])


def test_real_h200_single_gpu() -> None:
    path = DATA_DIR / "nvidia-smi-topo.txt"
    assert discover_domains(path.read_text()) == "0"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (TWO_GPU_NV18, "0-1"),
        (FOUR_GPU_TWO_PAIRS, "0-1,2-3"),
        (EIGHT_GPU_TWO_QUADS, "0-3,4-7"),
        (EIGHT_GPU_QUADS_NODE, "0-3,4-7"),
        (EIGHT_GPU_NVSWITCH, "0-7"),
        (EIGHT_GPU_NVSWITCH_NICS, "0-7"),
        (TWO_PAIRS_MLX_NICS, "0-1,2-3"),
        (matrix(groups_matrix([[0], [1], [2], [3]], "NV1", "PHB")), "0,1,2,3"),
    ],
    ids=[
        "2gpu-nv18",
        "4gpu-pairs",
        "8gpu-quads-sys",
        "8gpu-quads-node",
        "8gpu-nvswitch",
        "8gpu-nvswitch-nics",
        "4gpu-pairs-mlx",
        "4gpu-pcie-only",
    ],
)
def test_hand_written_matrices(text: str, expected: str) -> None:
    assert discover_domains(text) == expected


def test_chain_of_nvlinks_is_one_domain() -> None:
    links = groups_matrix([[0], [1], [2], [3]], "NV1", "SYS")
    for i in range(3):
        links[i][i + 1] = links[i + 1][i] = "NV2"
    assert discover_domains(matrix(links)) == "0-3"


def test_space_aligned_copy_without_tabs() -> None:
    text = FOUR_GPU_TWO_PAIRS.replace("\t\t", "\t").replace("\t", "    ")
    assert discover_domains(text) == "0-1,2-3"


def test_crlf_line_endings() -> None:
    assert discover_domains(EIGHT_GPU_NVSWITCH_NICS.replace("\n", "\r\n")) == "0-7"


def test_non_contiguous_domains_parse_but_cannot_be_annotated() -> None:
    links = groups_matrix([[0, 2], [1, 3]], "NV4", "SYS")
    assert parse_topology(matrix(links)).domains == ((0, 2), (1, 3))
    with pytest.raises(TopologyError, match="not a run of consecutive GPU indices"):
        discover_domains(matrix(links))


def replace_cell(text: str, row: str, column: int, value: str) -> str:
    """`text` with cell `column` (0 = label) of the line starting with `row` replaced."""
    lines = text.split("\n")
    for index, line in enumerate(lines):
        if line.startswith(row + "\t"):
            cells = line.split("\t")
            cells[column] = value
            lines[index] = "\t".join(cells)
    return "\n".join(lines)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no header line"),
        ("\n  \n", "no header line"),
        (LEGEND, "legend before any matrix"),
        ("\tCPU Affinity\tNUMA Affinity\n", "has no GPU<i> columns"),
        ("\tGPU0\tGPU2\nGPU0\t X \tSYS\nGPU2\tSYS\t X \n", "are not GPU0..GPU{n-1}"),
        ("\tGPU0\tGPU0\nGPU0\t X \tX\n", "names GPU0 twice"),
        ("\tGPU0\tNIC0\tNIC0\nGPU0\t X \tPHB\tPHB\n", "repeats a device column"),
        ("\tGPU0\tGPU1\nGPU0\t X \tNV4\n", "no matrix row for GPU1"),
        ("\tGPU0\tGPU1\nGPU0\t X \nGPU1\tNV4\t X \n", "row GPU0 has 1 link cells"),
        (replace_cell(TWO_GPU_NV18, "GPU0", 2, "FOO"), "unknown link 'FOO' from GPU0 to GPU1"),
        (replace_cell(TWO_GPU_NV18, "GPU1", 2, "NV4"), "GPU1 to itself is 'NV4'"),
        (replace_cell(TWO_GPU_NV18, "GPU0", 2, "SYS"), "asymmetric link"),
        (TWO_GPU_NV18.replace("GPU1\tNV18", "GPU0\tNV18"), "second row for GPU0"),
        (TWO_GPU_NV18.replace("GPU1\tNV18", "GPU7\tNV18"), "row 'GPU7' is not a device"),
    ],
)
def test_malformed_input_raises_specific_error(text: str, message: str) -> None:
    with pytest.raises(TopologyError) as caught:
        discover_domains(text)
    assert message in str(caught.value)
    assert str(caught.value).startswith("nvidia-smi topo -m: ")


TOPO_TOKENS = st.sampled_from(
    [
        "GPU0",
        "GPU1",
        "GPU2",
        "NIC0",
        "mlx5_0",
        "\t",
        "  ",
        " ",
        "\n",
        "\r\n",
        " X ",
        "X",
        "NV4",
        "NV18",
        "SYS",
        "NODE",
        "PIX",
        "N/A",
        "CPU Affinity",
        "Legend:",
        UNDERLINE,
        RESET,
        "\x1b[",
        "0-15",
        "GPU99999",
        "GPU",
    ]
)
VALID_SAMPLES = [
    TWO_GPU_NV18,
    FOUR_GPU_TWO_PAIRS,
    EIGHT_GPU_TWO_QUADS,
    EIGHT_GPU_NVSWITCH_NICS,
    TWO_PAIRS_MLX_NICS,
]


def parses_or_topology_error(text: str) -> None:
    try:
        result = discover_domains(text)
    except TopologyError:
        return
    assert isinstance(result, str)


@given(st.lists(TOPO_TOKENS, max_size=60).map("".join))
def test_fuzz_token_soup(text: str) -> None:
    parses_or_topology_error(text)


@given(st.text(max_size=200))
def test_fuzz_arbitrary_text(text: str) -> None:
    parses_or_topology_error(text)


@given(
    st.sampled_from(VALID_SAMPLES),
    st.lists(st.tuples(st.integers(0, 2000), st.integers(0, 8), st.text(max_size=4)), max_size=4),
)
def test_fuzz_mutated_valid_output(sample: str, edits: list[tuple[int, int, str]]) -> None:
    text = sample
    for position, deleted, inserted in edits:
        at = position % (len(text) + 1)
        text = text[:at] + inserted + text[at + deleted :]
    parses_or_topology_error(text)


@pytest.mark.parametrize(
    ("name", "expected"),
    [("hgx-8gpu-nvswitch.txt", "0-7"), ("pcie-8gpu-nvlink-pairs.txt", "0-1,2-3,4-5,6-7")],
)
def test_the_8_gpu_samples(name: str, expected: str) -> None:
    """The 8-GPU samples of tests/data/topology (see its README), NICs and NIC legend included."""
    text = (TOPOLOGY_SAMPLES / name).read_text()
    assert discover_domains(text) == expected
    assert parse_topology(text).gpu_count == 8
