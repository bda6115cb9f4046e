"""scheduler.dra.cel and cel_library on plain devices: the DRA CEL environment's verdicts, its
errors, its bounds and its caches. The comparison with kube-scheduler's own CEL is
tests/integration/test_dra_cel_exact.py."""

from __future__ import annotations

from decimal import Decimal

import pytest

from hack.bench.cel import CORPUS, DEVICES, api_device
from scheduler.dra.cel import (
    MAX_EXPRESSION_LENGTH,
    MAX_MESSAGE,
    CelSelectors,
    literal_domains,
    selector_error,
)
from scheduler.dra.cel_library import (
    CelFunctionError,
    decode_quantity,
    encode_quantity,
    function_table,
    parse_quantity_text,
)
from scheduler.dra.selectors import SelectorError, SelectorMatcher
from scheduler.model.device_capacity import DeviceCapacity
from scheduler.model.devices import Device
from scheduler.model.semver import parse_version

DRIVER = "gpu.nvidia.com"
NV = "device.attributes['gpu.nvidia.com']"


def gpu(**attributes: object) -> Device:
    version = parse_version("550.54.15")
    assert version is not None
    base: dict[str, object] = {
        f"{DRIVER}/type": "gpu",
        f"{DRIVER}/productName": "NVIDIA A100-SXM4-80GB",
        f"{DRIVER}/driverVersion": version,
        f"{DRIVER}/index": 2,
        f"{DRIVER}/mig": False,
    }
    base.update({f"{DRIVER}/{k}": v for k, v in attributes.items()})
    return Device(
        name="gpu-0",
        attributes=base,  # type: ignore[arg-type]
        capacity={f"{DRIVER}/memory": DeviceCapacity(value=Decimal(80 * 2**30), name="memory")},
    )


def verdict(selectors: CelSelectors, expression: str, device: Device, driver: str = DRIVER) -> str:
    try:
        return str(selectors.evaluate(expression, driver, device)).lower()
    except SelectorError:
        return "error"


def test_is_a_selector_matcher() -> None:
    matcher: SelectorMatcher = CelSelectors()
    assert matcher.matches(f"{NV}.type == 'gpu'", DRIVER, gpu(), "k")


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        (f"device.driver == 'gpu.nvidia.com' && {NV}.type == 'gpu'", "true"),
        (f"device.driver == 'other' && {NV}.type == 'gpu'", "false"),
        (f"{NV}.productName.matches('^NVIDIA A100')", "true"),
        (f"{NV}.index == 2 && !{NV}.mig", "true"),
        ("device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0", "true"),
        ("device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('81Gi')) >= 0", "false"),
        ("device.capacity['gpu.nvidia.com'].memory == quantity('81920Mi')", "true"),
        ("device.capacity['gpu.nvidia.com'].memory.isLessThan(quantity('0.1Ti'))", "true"),
        (f"{NV}.driverVersion.isGreaterThan(semver('550.0.0'))", "true"),
        (f"{NV}.driverVersion.isGreaterThan(semver('550.100.0'))", "false"),
        (f"{NV}.driverVersion == semver('550.54.15+other-build')", "true"),
        (f"{NV}.driverVersion.minor() == 54 && {NV}.driverVersion.patch() == 15", "true"),
        # an unknown domain is an empty map; a missing key inside a known one is an error
        ("device.attributes['x.example.com'].size() == 0", "true"),
        ("device.capacity['x.example.com'].size() == 0", "true"),
        ("device.attributes['x.example.com'].model == 'a'", "error"),
        (f"{NV}.nosuch == 'a'", "error"),
        (f"has({NV}.nosuch)", "false"),
        (f"{NV}.?nosuch.orValue('none') == 'none'", "true"),
        (f"cel.bind(nv, {NV}, nv.type == 'gpu' && nv.index > 1)", "true"),
        (f"{NV}.productName.lowerAscii().split('-')[1] == 'sxm4'", "true"),
        (f"{NV}.productName.find('[0-9]+GB') == '80GB'", "true"),
        (f"{NV}.productName.findAll('[0-9]+', 1) == ['100']", "true"),
        ("sets.intersects([1, 2], [2, 3]) && !sets.contains([1], [2])", "true"),
        # the result must be a bool
        ("1 + 1", "error"),
        (f"{NV}.index", "error"),
        (f"{NV}.mig", "false"),
        ("device.driver == 1", "error"),
        ("device.driver.", "error"),
        ("quantity('1.5').asInteger() == 1", "error"),
        ("quantity('1.5GB') == quantity('1')", "error"),
        ("semver('1.2') == semver('1.2.0')", "error"),
        ("1 / 0 == 1 || true", "true"),
    ],
)
def test_verdicts(expression: str, expected: str) -> None:
    assert verdict(CelSelectors(), expression, gpu()) == expected


def test_unqualified_names_live_in_the_drivers_domain() -> None:
    device = Device(name="nic", attributes={"dra.example.com/model": "cx7", "other.io/slot": 3})
    selectors = CelSelectors()
    expression = "device.attributes['dra.example.com'].model == 'cx7'"
    assert verdict(selectors, expression, device, "dra.example.com") == "true"
    assert verdict(selectors, "device.attributes['other.io'].slot == 3", device) == "true"


def test_corpus_verdicts_on_plain_data() -> None:
    """The bench corpus's reference verdicts hold for the Python evaluator too."""
    selectors = CelSelectors()
    for case in CORPUS:
        for key, raw in DEVICES.items():
            got = verdict(selectors, case.expression, api_device(key, raw), str(raw["driver"]))
            assert got == case.expected[key], (case.expression, key)


def test_errors_are_bounded_and_name_the_expression() -> None:
    selectors = CelSelectors()
    long = f"{NV}.nosuch == '{'x' * 5000}'"
    with pytest.raises(SelectorError) as caught:
        selectors.matches(long, DRIVER, gpu(), "k")
    message = str(caught.value)
    assert len(message) <= MAX_MESSAGE
    assert message.startswith("CEL runtime error in ")
    assert "no such key: nosuch" in message
    with pytest.raises(SelectorError, match="must evaluate to bool or the unknown type, not int"):
        selectors.matches("1 + 1", DRIVER, gpu(), "k")
    with pytest.raises(SelectorError, match="could not be converted to bool"):
        selectors.matches(f"{NV}.type", DRIVER, gpu(), "k")
    assert len(str(selector_error("compile", "y" * 10_000, "z" * 10_000))) <= MAX_MESSAGE


def test_length_limit() -> None:
    selectors = CelSelectors()
    at_limit = "true" + " " * (MAX_EXPRESSION_LENGTH - 4)
    assert selectors.matches(at_limit, DRIVER, gpu(), "k")
    with pytest.raises(SelectorError, match="at most 10240 allowed"):
        selectors.matches(at_limit + " ", DRIVER, gpu(), "k")


def test_programs_compile_once_and_verdicts_are_memoized() -> None:
    selectors = CelSelectors(program_cache_size=2, memo_size=4)
    expression = f"{NV}.type == 'gpu'"
    for _ in range(3):
        assert selectors.matches(expression, DRIVER, gpu(), ("pool", 1, "gpu-0"))
    assert selectors.counters.compilations == 1
    assert selectors.counters.evaluations == 1
    assert selectors.counters.memo_hits == 2
    # another key is another evaluation of the same program
    assert not selectors.matches(expression, DRIVER, gpu(type="mig"), ("pool", 2, "gpu-0"))
    assert (selectors.counters.compilations, selectors.counters.evaluations) == (1, 2)
    # errors are memoized too, and raised each time
    for _ in range(2):
        with pytest.raises(SelectorError):
            selectors.matches("1 +", DRIVER, gpu(), "k")
    assert selectors.counters.compilations == 2
    assert selectors.counters.memo_hits == 3


def test_caches_are_bounded() -> None:
    selectors = CelSelectors(program_cache_size=2, memo_size=3)
    for index in range(10):
        selectors.matches(f"{NV}.index != {index}", DRIVER, gpu(), index)
    assert selectors.cached_programs == 2
    assert selectors.memo_entries == 3
    selectors.matches(f"{NV}.index != 0", DRIVER, gpu(), 0)
    assert selectors.counters.compilations == 11


def test_literal_domains() -> None:
    expression = (
        "device.attributes['a.io'].x && device.capacity[?\"b.io\"].y "
        "&& device.attributes.c && 'd.io' in device.attributes"
    )
    assert literal_domains(expression) == ("a.io", "b.io", "c")
    # a macro or method on the outer map is no domain
    assert literal_domains("device.attributes.all(d, d != '') && device.capacity.size() > 0") == ()


def test_iterating_the_outer_map_sees_only_the_devices_domains() -> None:
    expression = "device.attributes.all(d, d == 'gpu.nvidia.com') && device.attributes.size() == 1"
    assert verdict(CelSelectors(), expression, gpu()) == "true"


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("80Gi", Decimal(80 * 2**30)),
        ("1.5", Decimal("1.5")),
        ("1.", Decimal(1)),
        (".5k", Decimal(500)),
        ("-3m", Decimal("-0.003")),
        ("2e3", Decimal(2000)),
        ("1E-2", Decimal("0.01")),
    ],
)
def test_quantity_parsing(text: str, value: Decimal) -> None:
    assert parse_quantity_text(text) == value
    assert decode_quantity(encode_quantity(parse_quantity_text(text))) == value


@pytest.mark.parametrize("text", ["", "1GB", " 1", "Gi", "1.2.3", "1Gi "])
def test_quantity_refusals(text: str) -> None:
    with pytest.raises(CelFunctionError):
        parse_quantity_text(text)


def test_equal_quantities_encode_equally() -> None:
    assert encode_quantity(Decimal("1000")) == encode_quantity(parse_quantity_text("1k"))
    assert encode_quantity(Decimal("0")) == encode_quantity(Decimal("-0.000"))


def test_function_table_dispatches_by_argument_type() -> None:
    table = function_table()
    one, two = table["quantity"]("1"), table["quantity"]("2")
    assert table["compareTo"](one, two) == -1
    assert table["compareTo"](table["semver"]("2.0.0"), table["semver"]("1.0.0-rc.1")) == 1
    assert table["semver"]("1.0.0-alpha") != table["semver"]("1.0.0")
    assert (
        table["compareTo"](table["semver"]("1.0.0-alpha.2"), table["semver"]("1.0.0-alpha.10"))
        == -1
    )
    with pytest.raises(CelFunctionError):
        table["compareTo"]("a", "b")
