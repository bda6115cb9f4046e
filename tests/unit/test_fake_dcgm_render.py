"""The /metrics text of the fake dcgm-exporter, parsed back and checked against dcgm-exporter's."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

from hack.fake_dcgm.exporter import Exporter
from hack.fake_dcgm.identity import gpu_uuid
from hack.fake_dcgm.render import RenderOptions, escape, format_value
from tests.unit.test_fake_dcgm_builders import GPUS, USAGE, Json, node, pod

T0 = 1767225600.0  # 2026-01-01T00:00:00Z
BASE = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION")
POD = ("container", "namespace", "pod")
MIG = (*BASE[:5], "GPU_I_PROFILE", "GPU_I_ID", *BASE[5:])

_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)\{(.*)\} (\S+)$")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\\n]|\\.)*)"(,|$)')


@dataclass(frozen=True)
class Series:
    name: str
    labels: tuple[tuple[str, str], ...]
    value: float

    def get(self, key: str) -> str:
        return dict(self.labels)[key]


@dataclass
class Exposition:
    help: dict[str, str]
    types: dict[str, str]
    series: list[Series]

    def family(self, name: str) -> list[Series]:
        return [s for s in self.series if s.name == name]


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n"}.get(m.group(1), m.group(1)), value)


def parse(text: str) -> Exposition:
    """A strict parser of the subset of the text format the exporter writes."""
    assert text.endswith("\n")
    out = Exposition({}, {}, [])
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name, _, help_text = line.removeprefix("# HELP ").partition(" ")
            out.help[name] = help_text
        elif line.startswith("# TYPE "):
            name, _, kind = line.removeprefix("# TYPE ").partition(" ")
            assert name in out.help, f"TYPE before HELP for {name}"
            out.types[name] = kind
        else:
            match = _SAMPLE.match(line)
            assert match, line
            name, inner, value = match.groups()
            assert name in out.types, f"sample before TYPE: {line}"
            labels = []
            pos = 0
            while pos < len(inner):
                label = _LABEL.match(inner, pos)
                assert label, f"bad labels at {inner[pos:]!r}"
                labels.append((label.group(1), _unescape(label.group(2))))
                pos = label.end()
            out.series.append(Series(name, tuple(labels), float(value)))
    return out


def scrape(
    nodes: list[Json], pods: list[Json], exporter: Exporter | None = None, now: float = T0 + 100
) -> Exposition:
    """Metrics at ``now`` of a view adopted 10 s earlier."""
    exporter = exporter or Exporter()
    exporter.update(nodes, pods, now - 10)
    return parse(exporter.metrics(now))


def keys(series: Series) -> tuple[str, ...]:
    return tuple(k for k, _ in series.labels)


def test_families_have_help_type_and_dcgm_label_sets() -> None:
    out = scrape([node(gpus=2)], [pod("p", annotations={USAGE: "constant:util=40"})])
    assert out.types == {
        "DCGM_FI_DEV_GPU_UTIL": "gauge",
        "DCGM_FI_DEV_POWER_USAGE": "gauge",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "counter",
        "DCGM_FI_DEV_FB_USED": "gauge",
        "DCGM_FI_DEV_XID_ERRORS": "gauge",
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": "counter",
    }
    util = out.family("DCGM_FI_DEV_GPU_UTIL")
    assert [keys(s) for s in util] == [BASE + POD, BASE]
    held = util[0]
    assert dict(held.labels) == {
        "gpu": "0",
        "UUID": gpu_uuid("g-0", 0),
        "pci_bus_id": "00000000:18:00.0",
        "device": "nvidia0",
        "modelName": "NVIDIA H200",
        "Hostname": "g-0",
        "DCGM_FI_DRIVER_VERSION": "580.159.04",
        "container": "main",
        "namespace": "ns",
        "pod": "p",
    }
    assert held.value == 40.0
    assert util[1].get("gpu") == "1" and util[1].value == 0.0
    power = {s.get("gpu"): s.value for s in out.family("DCGM_FI_DEV_POWER_USAGE")}
    assert power == {"0": pytest.approx(118 + 572 * 0.4), "1": 77.0}
    energy = {s.get("gpu"): s.value for s in out.family("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")}
    assert energy == {"0": pytest.approx((118 + 572 * 0.4) * 10_000, abs=1), "1": 770_000}


def test_uuids_are_stable_and_distinct() -> None:
    assert gpu_uuid("g-0", 0) == gpu_uuid("g-0", 0)
    assert len({gpu_uuid(n, i) for n in ("g-0", "g-1") for i in range(8)}) == 16
    assert re.fullmatch(
        r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}", gpu_uuid("a", 1)
    )


def test_label_values_are_escaped_and_round_trip() -> None:
    name = 'we"ird\\pod\nx'
    out = scrape([node(gpus=1)], [pod(name, namespace='n"s')])
    line = next(s for s in out.family("DCGM_FI_DEV_FB_USED"))
    assert line.get("pod") == name
    assert line.get("namespace") == 'n"s'
    assert escape(name) == 'we\\"ird\\\\pod\\nx'


def test_shared_gpu_has_one_series_per_pod_with_the_gpu_value() -> None:
    out = scrape(
        [node(gpus=1)],
        [
            pod("a", annotations={GPUS: "0", USAGE: "constant:util=20"}),
            pod("b", annotations={GPUS: "0", USAGE: "constant:util=60"}),
        ],
    )
    util = out.family("DCGM_FI_DEV_GPU_UTIL")
    assert [(s.get("pod"), s.value) for s in util] == [("a", 60.0), ("b", 60.0)]


def test_profiling_off_by_default_on_by_node_annotation_or_flag() -> None:
    nodes = [
        node("plain", gpus=1),
        node("profiled", gpus=1, annotations={"fake-dcgm.gpu-scheduler.io/profiling": "true"}),
    ]
    pods = [
        pod("p", node_name="profiled", annotations={USAGE: "periodic:period=3,duty=0.1,level=100"})
    ]
    out = scrape(nodes, pods, Exporter(render_options=RenderOptions(engine_window_s=3.0)))
    active = out.family("DCGM_FI_PROF_GR_ENGINE_ACTIVE")
    assert out.types["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] == "gauge"
    assert [(s.get("Hostname"), s.get("pod")) for s in active] == [("profiled", "p")]
    assert active[0].value == pytest.approx(0.1)  # a whole period averaged: the true duty
    everywhere = scrape(nodes, pods, Exporter(profiling=True))
    assert {s.get("Hostname") for s in everywhere.family("DCGM_FI_PROF_GR_ENGINE_ACTIVE")} == {
        "plain",
        "profiled",
    }
    assert "DCGM_FI_PROF_GR_ENGINE_ACTIVE" not in scrape(nodes[:1], []).types


def test_mig_instances_get_gr_engine_active_series_with_instance_labels() -> None:
    out = scrape(
        [node(gpus=1, mig={"1g.18gb": 2})],
        [pod("m", resource="nvidia.com/mig-1g.18gb", annotations={USAGE: "constant:util=70"})],
        Exporter(profiling=True),
    )
    per_instance = [s for s in out.series if "GPU_I_ID" in dict(s.labels)]
    assert {s.name for s in per_instance} == {"DCGM_FI_PROF_GR_ENGINE_ACTIVE"}
    assert [keys(s) for s in per_instance] == [MIG + POD, MIG]
    first, second = per_instance
    assert (first.get("gpu"), first.get("GPU_I_PROFILE"), first.get("GPU_I_ID")) == (
        "1",
        "1g.18gb",
        "1",
    )
    assert first.get("pod") == "m"
    assert first.value == pytest.approx(0.7)
    assert (second.get("GPU_I_ID"), second.value) == ("2", 0.0)
    gpu_level = [s for s in out.family("DCGM_FI_DEV_GPU_UTIL") if s.get("gpu") == "1"]
    assert [keys(s) for s in gpu_level] == [BASE]
    assert gpu_level[0].value == pytest.approx(70 / 7)


def test_model_name_and_driver_version() -> None:
    out = scrape(
        [
            node("a", gpus=1, product="NVIDIA-A100-SXM4-80GB"),
            node("b", gpus=1, product=None),
            node("c", gpus=1, product="NVIDIA-L4-Special"),
        ],
        [],
        Exporter(render_options=RenderOptions(driver_version="535.1")),
    )
    names = {s.get("Hostname"): s.get("modelName") for s in out.family("DCGM_FI_DEV_FB_USED")}
    # dcgm-exporter's names for known products; unknown ones get their spaces back.
    assert names == {"a": "NVIDIA A100-SXM4-80GB", "b": "", "c": "NVIDIA L4 Special"}
    assert {s.get("DCGM_FI_DRIVER_VERSION") for s in out.series} == {"535.1"}


def test_value_formatting() -> None:
    assert format_value(3.0) == "3"
    assert format_value(0.25) == "0.25"
    assert format_value(1e20) == "1e+20"
    assert format_value(float("nan")) == "nan"


def test_update_reports_each_problem_once_while_it_persists() -> None:
    exporter = Exporter()
    bad = [pod("p", annotations={USAGE: "constant:util=x"})]
    first = exporter.update([node(gpus=1)], bad, T0)
    assert len(first) == 1 and "util='x' is not a number" in first[0]
    assert exporter.update([node(gpus=1)], bad, T0 + 1) == []
    assert exporter.update([node(gpus=1)], [], T0 + 2) == []
    assert len(exporter.update([node(gpus=1)], bad, T0 + 3)) == 1


def test_energy_counter_spans_view_changes_without_decreasing() -> None:
    exporter = Exporter()
    nodes = [node(gpus=1)]
    exporter.update(nodes, [], T0)
    exporter.update(nodes, [pod("p", annotations={USAGE: "constant:util=100"})], T0 + 10)
    text = exporter.metrics(T0 + 20)
    (energy,) = parse(text).family("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")
    assert energy.value == pytest.approx((77 * 10 + 690 * 10) * 1000, abs=1)
