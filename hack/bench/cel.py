"""CEL libraries for DRA device selectors, measured: exactness against kube-scheduler, then speed.

    python -m hack.bench.cel [--repeat 200] [--devices 64] [--pods 50] [-o json]

The corpus (`CORPUS`) is NVIDIA-style selectors over three devices (`DEVICES`, in the API's
JSON), each case with the verdict kube-scheduler's CEL gives (match, no match or error):
`hack/celcheck` (k8s.io/dynamic-resource-allocation@v0.37.2 cel) produced them and
tests/integration/test_dra_cel_exact.py checks they still hold. Each candidate library runs every
case with the same Kubernetes functions (`scheduler.dra.cel_library`, quantities as bytes and
versions as tagged lists, unknown literal domains as empty maps) so that what differs is the
library:

- `cel-expr-python` (cel-cpp): `scheduler.dra.cel.CelSelectors` itself;
- `common-expression-language` (the Rust cel crate through PyO3, module `cel`);
- `cel-python` (pure Python, module `celpy`).

Reported per candidate: how many verdicts equal the reference, which differ, the median compile
time per expression and the median evaluation time per (expression, device). Then, for the
chosen library, CEL evaluations per pod with and without the memo: `--pods` pods with the same
claim (a class selector and a request selector) are matched against `--devices` devices of one
pool, as the allocator asks, with `memo_key` (pool, generation, device).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from decimal import Decimal
from typing import Any

from scheduler.dra import cel_library
from scheduler.dra.cel import CelSelectors, device_variables, literal_domains
from scheduler.dra.selectors import SelectorError
from scheduler.model.device_capacity import DeviceCapacity
from scheduler.model.devices import AttributeValue, Device, attribute_value
from scheduler.model.fields import FieldError
from scheduler.model.quantity import parse_quantity

DRIVER = "gpu.nvidia.com"
NV = "device.attributes['gpu.nvidia.com']"
MEMORY = "device.capacity['gpu.nvidia.com'].memory"

DEVICES: dict[str, dict[str, Any]] = {
    "a100": {
        "driver": DRIVER,
        "attributes": {
            "type": {"string": "gpu"},
            "productName": {"string": "NVIDIA A100-SXM4-80GB"},
            "architecture": {"string": "Ampere"},
            "driverVersion": {"version": "550.54.15"},
            "cudaComputeCapability": {"version": "8.0.0"},
            "index": {"int": 0},
            "uuid": {"string": "GPU-4f2a1c9e"},
            "brand": {"string": "Nvidia"},
            "resource.kubernetes.io/pcieRoot": {"string": "pci0000:00"},
        },
        "capacity": {"memory": {"value": "80Gi"}},
        "allowMultipleAllocations": False,
    },
    "mig": {
        "driver": DRIVER,
        "attributes": {
            "type": {"string": "mig"},
            "productName": {"string": "NVIDIA H100 80GB HBM3"},
            "profile": {"string": "1g.10gb"},
            "driverVersion": {"version": "535.129.3-rc.1+build.7"},
            "index": {"int": 3},
            "parentIndex": {"int": 1},
        },
        "capacity": {"memory": {"value": "9728Mi"}, "multiprocessors": {"value": "16"}},
        "allowMultipleAllocations": True,
    },
    "nic": {
        "driver": "dra.example.com",
        "attributes": {"model": {"string": "cx7"}, "sriov": {"bool": True}},
        "capacity": {"bandwidth": {"value": "400G"}},
        "allowMultipleAllocations": False,
    },
}


@dataclass(frozen=True)
class Case:
    expression: str
    expected: dict[str, str]
    """device name -> "true", "false" or "error", as kube-scheduler's CEL answers."""


def _all(verdict: str) -> dict[str, str]:
    return dict.fromkeys(DEVICES, verdict)


def _per(a100: str, mig: str, nic: str) -> dict[str, str]:
    return {"a100": a100, "mig": mig, "nic": nic}


CORPUS: tuple[Case, ...] = (
    Case(
        f"device.driver == 'gpu.nvidia.com' && {NV}.type == 'gpu'", _per("true", "false", "false")
    ),
    Case(f"{NV}.productName.matches('A100|H100')", _per("true", "true", "error")),
    Case(f"{NV}.productName.startsWith('NVIDIA H100')", _per("false", "true", "error")),
    Case(f"{MEMORY}.compareTo(quantity('40Gi')) >= 0", _per("true", "false", "error")),
    Case(f"{MEMORY}.isGreaterThan(quantity('9.5Gi'))", _per("true", "false", "error")),
    Case(f"{MEMORY} == quantity('9728Mi')", _per("false", "true", "error")),
    Case(
        f"{MEMORY}.add(quantity('512Mi')).asInteger() > 10000000000", _per("true", "true", "error")
    ),
    Case(f"{MEMORY}.asApproximateFloat() > 1e10", _per("true", "true", "error")),
    Case(f"sign({MEMORY}.sub(quantity('80Gi'))) == 0", _per("true", "false", "error")),
    Case(f"{NV}.driverVersion.isGreaterThan(semver('550.0.0'))", _per("true", "false", "error")),
    Case(
        f"{NV}.driverVersion.compareTo(semver('535.129.3-rc.1')) == 0",
        _per("false", "true", "error"),
    ),
    Case(f"{NV}.driverVersion.major() >= 535", _per("true", "true", "error")),
    Case(f"{NV}.cudaComputeCapability.isLessThan(semver('9.0.0'))", _per("true", "error", "error")),
    Case(f"{NV}.driverVersion == semver('550.54.15')", _per("true", "false", "error")),
    Case(
        "semver('v1.2', true).minor() == 2 && isSemver('1.2.3') && !isSemver('1.2')", _all("true")
    ),
    Case("isQuantity('1.5Gi') && !isQuantity('1.5GB')", _all("true")),
    Case("device.attributes['unknown.example.com'].size() == 0", _all("true")),
    Case("device.attributes['unknown.example.com'].model == 'x'", _all("error")),
    Case(f"{NV}.missing == 'x'", _all("error")),
    Case(f"{NV}[?'profile'].orValue('') == '1g.10gb'", _per("false", "true", "false")),
    Case(f"has({NV}.profile)", _per("false", "true", "false")),
    Case("'gpu.nvidia.com' in device.attributes", _per("true", "true", "false")),
    Case(
        f"cel.bind(nv, {NV}, nv.type == 'mig' && nv.profile.split('.')[0] == '1g')",
        _per("false", "true", "error"),
    ),
    Case(f"{NV}.productName.lowerAscii().contains('h100')", _per("false", "true", "error")),
    Case(f"{NV}.productName.find('[0-9]+GB') == '80GB'", _per("true", "true", "error")),
    Case(f"{NV}.index in [0, 1, 2]", _per("true", "false", "error")),
    Case(f"{NV}.index", _per("error", "error", "error")),
    Case(f"{NV}.brand", _per("error", "error", "error")),
    Case(
        "device.attributes['resource.kubernetes.io'].pcieRoot == 'pci0000:00'",
        _per("true", "error", "error"),
    ),
    Case("device.allowMultipleAllocations", _per("false", "true", "false")),
    Case(
        "device.attributes['dra.example.com'].sriov && "
        "device.capacity['dra.example.com'].bandwidth.compareTo(quantity('100G')) > 0",
        _per("error", "error", "true"),
    ),
    Case(
        f"sets.contains(['gpu', 'mig'], [{NV}.?type.orValue('none')])",
        _per("true", "true", "false"),
    ),
    Case("device.driver == 1", _all("error")),
    Case("device.driver", _all("error")),
    Case("1 / 0 == 1 || device.driver != ''", _all("true")),
    Case("device.attributes.exists(d, d == 'dra.example.com')", _per("false", "false", "true")),
    Case("quantity('1.5').asInteger() == 1", _all("error")),
    Case("semver('01.0.0').major() == 1", _all("error")),
    Case("device.driver.nosuchfunction()", _all("error")),
)


def api_device(name: str, raw: Mapping[str, Any]) -> Device:
    """A `Device` from the corpus's API JSON (unqualified names in the driver's domain)."""
    driver = str(raw["driver"])
    attributes: dict[str, AttributeValue] = {}
    errors: list[FieldError] = []
    for key, entry in raw.get("attributes", {}).items():
        value = attribute_value(entry, key, errors)
        if value is not None:
            attributes[key if "/" in key else f"{driver}/{key}"] = value
    capacity = {
        (key if "/" in key else f"{driver}/{key}"): DeviceCapacity(
            value=parse_quantity(str(entry["value"])), name=key
        )
        for key, entry in raw.get("capacity", {}).items()
    }
    if errors:
        raise ValueError(f"corpus device {name}: {errors[0]}")
    return Device(
        name=name,
        attributes=attributes,
        capacity=capacity,
        allow_multiple_allocations=bool(raw.get("allowMultipleAllocations", False)),
    )


Evaluator = Callable[[str, str, Device], bool]


@dataclass
class Candidate:
    name: str
    compile: Callable[[str], object]
    evaluate: Evaluator


def _cel_expr_python() -> Candidate:
    selectors = CelSelectors()
    return Candidate("cel-expr-python", selectors.compile, selectors.evaluate)


def _plain(value: Any) -> Any:
    if isinstance(value, Decimal):
        return str(value)
    return value


def _rust() -> Candidate:
    import cel as rust_cel  # type: ignore[import-untyped,import-not-found,unused-ignore]

    context = rust_cel.Context()
    for name, function in cel_library.function_table().items():
        context.add_function(name, function)
    programs: dict[str, Any] = {}

    def evaluate(expression: str, driver: str, device: Device) -> bool:
        variables = device_variables(driver, device, literal_domains(expression))
        context.add_variable("device", _nested(variables))
        try:
            program = programs.get(expression) or programs.setdefault(
                expression, rust_cel.compile(expression)
            )
            result = program.execute(context)
        except Exception as error:  # the binding raises builtin exceptions of many kinds
            raise SelectorError(str(error)) from error
        if not isinstance(result, bool):
            raise SelectorError("not a bool")
        return result

    return Candidate("common-expression-language", rust_cel.compile, evaluate)


def _celpy() -> Candidate:
    import celpy  # type: ignore[import-untyped,import-not-found,unused-ignore]
    from celpy import celtypes  # type: ignore[import-untyped,import-not-found,unused-ignore]

    functions = {
        name: _celpy_function(f, celtypes) for name, f in cel_library.function_table().items()
    }
    environment = celpy.Environment()
    programs: dict[str, Any] = {}

    def compile_(expression: str) -> object:
        return environment.program(environment.compile(expression), functions=functions)

    def evaluate(expression: str, driver: str, device: Device) -> bool:
        variables = device_variables(driver, device, literal_domains(expression))
        try:
            program = programs.get(expression) or programs.setdefault(
                expression, compile_(expression)
            )
            result = program.evaluate({"device": _to_celpy(_nested(variables), celtypes)})
        except Exception as error:  # celpy raises its own and builtin exceptions
            raise SelectorError(str(error)) from error
        if not isinstance(result, celtypes.BoolType):
            raise SelectorError(f"not a bool: {result!r}")
        return bool(result)

    return Candidate("cel-python", compile_, evaluate)


def _celpy_function(function: Callable[..., Any], celtypes: Any) -> Callable[..., Any]:
    def wrapped(*args: Any) -> Any:
        result = function(*(_from_celpy(a, celtypes) for a in args))
        if isinstance(result, bool):
            return celtypes.BoolType(result)
        if isinstance(result, int):
            return celtypes.IntType(result)
        if isinstance(result, float):
            return celtypes.DoubleType(result)
        if isinstance(result, bytes):
            return celtypes.BytesType(result)
        if isinstance(result, list):
            return celtypes.ListType([celtypes.StringType(x) for x in result])
        return celtypes.StringType(result)

    return wrapped


def _from_celpy(value: Any, celtypes: Any) -> Any:
    if isinstance(value, celtypes.BoolType):
        return bool(value)
    if isinstance(value, celtypes.IntType):
        return int(value)
    if isinstance(value, bytes):
        return bytes(value)
    if isinstance(value, list):
        return [_from_celpy(v, celtypes) for v in value]
    return str(value) if isinstance(value, str) else value


def _to_celpy(value: Any, celtypes: Any) -> Any:
    if isinstance(value, dict):
        return celtypes.MapType(
            {celtypes.StringType(k): _to_celpy(v, celtypes) for k, v in value.items()}
        )
    if isinstance(value, list):
        return celtypes.ListType([_to_celpy(v, celtypes) for v in value])
    if isinstance(value, bool):
        return celtypes.BoolType(value)
    if isinstance(value, int):
        return celtypes.IntType(value)
    if isinstance(value, bytes):
        return celtypes.BytesType(value)
    return celtypes.StringType(value)


def _nested(variables: Mapping[str, Any]) -> dict[str, Any]:
    return {name.removeprefix("device."): value for name, value in variables.items()}


CANDIDATES: dict[str, Callable[[], Candidate]] = {
    "cel-expr-python": _cel_expr_python,
    "common-expression-language": _rust,
    "cel-python": _celpy,
}


def verdict(evaluate: Evaluator, expression: str, driver: str, device: Device) -> str:
    try:
        return "true" if evaluate(expression, driver, device) else "false"
    except SelectorError:
        return "error"
    except Exception:  # a library crashing on an input counts as an error verdict
        return "error"


@dataclass
class CandidateReport:
    name: str
    available: bool
    agree: int = 0
    cases: int = 0
    differences: list[str] = field(default_factory=list)
    compile_us: float = 0.0
    evaluate_us: float = 0.0


def measure(make: Callable[[], Candidate], name: str, repeat: int) -> CandidateReport:
    try:
        candidate = make()
    except ImportError:
        return CandidateReport(name=name, available=False)
    report = CandidateReport(name=name, available=True)
    devices = {key: api_device(key, raw) for key, raw in DEVICES.items()}
    compile_times: list[float] = []
    evaluate_times: list[float] = []
    for case in CORPUS:
        started = time.perf_counter()
        with contextlib.suppress(Exception):  # a compile error is timed like a program
            candidate.compile(case.expression)
        compile_times.append(time.perf_counter() - started)
        for key, device in devices.items():
            driver = str(DEVICES[key]["driver"])
            got = verdict(candidate.evaluate, case.expression, driver, device)
            report.cases += 1
            if got == case.expected[key]:
                report.agree += 1
            else:
                report.differences.append(
                    f"{case.expression} on {key}: {got}, expected {case.expected[key]}"
                )
    sample = [(case, key) for case in CORPUS[:12] for key in ("a100", "mig")]
    for case, key in sample:
        driver = str(DEVICES[key]["driver"])
        started = time.perf_counter()
        for _ in range(repeat):
            verdict(candidate.evaluate, case.expression, driver, devices[key])
        evaluate_times.append((time.perf_counter() - started) / repeat)
    report.compile_us = statistics.median(compile_times) * 1e6
    report.evaluate_us = statistics.median(evaluate_times) * 1e6
    return report


@dataclass
class MemoReport:
    pods: int
    devices: int
    selectors: int
    evaluations_per_pod_without_memo: float
    evaluations_per_pod_with_memo: float
    memo_hits: int
    seconds_per_pod_without_memo: float
    seconds_per_pod_with_memo: float


def memo_run(pods: int, device_count: int) -> MemoReport:
    """`pods` pods with the same claim against one pool of `device_count` devices."""
    selectors = (CORPUS[0].expression, CORPUS[3].expression)
    base = api_device("gpu", DEVICES["a100"])
    devices = [
        Device(name=f"gpu-{i}", attributes=base.attributes, capacity=base.capacity)
        for i in range(device_count)
    ]
    results: dict[bool, tuple[float, float, int]] = {}
    for memo in (False, True):
        matcher = CelSelectors()
        started = time.perf_counter()
        for _ in range(pods):
            for device in devices:
                for expression in selectors:
                    if memo:
                        ok = matcher.matches(expression, DRIVER, device, ("pool-0", 1, device.name))
                    else:
                        ok = matcher.evaluate(expression, DRIVER, device)
                    if not ok:
                        break
        elapsed = time.perf_counter() - started
        evaluations = matcher.counters.evaluations if memo else pods * device_count * len(selectors)
        results[memo] = (evaluations / pods, elapsed / pods, matcher.counters.memo_hits)
    return MemoReport(
        pods=pods,
        devices=device_count,
        selectors=len(selectors),
        evaluations_per_pod_without_memo=results[False][0],
        evaluations_per_pod_with_memo=results[True][0],
        memo_hits=results[True][2],
        seconds_per_pod_without_memo=results[False][1],
        seconds_per_pod_with_memo=results[True][1],
    )


def render(reports: list[CandidateReport], memo: MemoReport) -> str:
    lines = [
        "| library | verdicts equal to kube-scheduler | compile us (median) "
        "| evaluate us (median) |",
        "|---|---:|---:|---:|",
    ]
    for report in reports:
        if not report.available:
            lines.append(f"| {report.name} | not installed | | |")
            continue
        lines.append(
            f"| {report.name} | {report.agree}/{report.cases} | {report.compile_us:.0f} "
            f"| {report.evaluate_us:.1f} |"
        )
    for report in reports:
        for difference in report.differences:
            lines.append(f"{report.name}: {difference}")
    lines.append(
        f"memo: {memo.pods} pods x {memo.devices} devices x {memo.selectors} selectors: "
        f"{memo.evaluations_per_pod_without_memo:.1f} CEL evaluations per pod without the memo "
        f"({memo.seconds_per_pod_without_memo * 1e3:.2f} ms), "
        f"{memo.evaluations_per_pod_with_memo:.1f} with it "
        f"({memo.seconds_per_pod_with_memo * 1e3:.2f} ms)"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hack.bench.cel")
    parser.add_argument("--repeat", type=int, default=200, help="evaluations timed per case")
    parser.add_argument("--devices", type=int, default=64)
    parser.add_argument("--pods", type=int, default=50)
    parser.add_argument("--candidates", default=",".join(CANDIDATES))
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table")
    args = parser.parse_args(argv)
    names = [name for name in args.candidates.split(",") if name]
    unknown = [name for name in names if name not in CANDIDATES]
    if unknown:
        print(f"cel: unknown candidates {unknown}; known: {list(CANDIDATES)}", file=sys.stderr)
        return 2
    reports = [measure(CANDIDATES[name], name, args.repeat) for name in names]
    memo = memo_run(args.pods, args.devices)
    if args.output == "json":
        print(
            json.dumps({"candidates": [asdict(r) for r in reports], "memo": asdict(memo)}, indent=2)
        )
    else:
        print(render(reports, memo))
    return 0


if __name__ == "__main__":
    sys.exit(main())
