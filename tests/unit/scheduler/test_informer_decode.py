"""The informer's JSON decoding: orjson, with the standard library for what orjson refuses."""

from __future__ import annotations

import json

import orjson
import pytest

from scheduler.kube.informer import decode_json

EVENT = {
    "type": "MODIFIED",
    "object": {
        "kind": "Pod",
        "metadata": {"name": "p", "annotations": {"gpu-scheduler.io/gpus": "0,1"}},
        "spec": {"nodeName": "n", "priority": -5, "overhead": None, "x": [1.5, True, "é"]},
    },
}


@pytest.mark.parametrize("data", [json.dumps(EVENT).encode(), json.dumps(EVENT)])
def test_decodes_like_the_standard_library(data: bytes | str) -> None:
    assert decode_json(data) == json.loads(data) == EVENT


def test_integers_of_the_api_range_are_exact() -> None:
    line = b'{"a": 9223372036854775807, "b": -9223372036854775808, "c": 18446744073709551615}'
    assert decode_json(line) == {"a": 2**63 - 1, "b": -(2**63), "c": 2**64 - 1}


@pytest.mark.parametrize("line", [b'{"v": NaN}', b'{"v": -Infinity}'])
def test_documents_orjson_refuses_are_still_read(line: bytes) -> None:
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(line)
    assert repr(decode_json(line)) == repr(json.loads(line))


@pytest.mark.parametrize("line", [b"{not json", b'{"a": 1', b""])
def test_text_that_is_not_json_raises_value_error(line: bytes) -> None:
    with pytest.raises(ValueError):
        decode_json(line)
