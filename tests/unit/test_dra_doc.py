"""docs/dra.md stays true to the code: its example pod and template are the demo's `dra-quad`
(`hack.demo_dra`), the messages it quotes are the plugin's and the allocator's own constants,
and every repository file it names exists."""

from __future__ import annotations

import re

import yaml

from hack.demo_dra import QUAD, QUAD_GPUS, claim_pod, claim_template, template_name
from scheduler.dra.allocator import CANNOT_ALLOCATE, INVALID_POOLS
from scheduler.model.allocations import MAX_RESERVED_FOR
from scheduler.model.claims import CLAIM_NOT_CREATED, DELETE_PROTECTION_FINALIZER
from scheduler.plugins.dynamic_resources import NOT_AVAILABLE
from tests.datasets import REPO_ROOT
from tests.docs import section_blocks

DOC = REPO_ROOT / "docs" / "dra.md"


def test_the_example_pod_and_template_are_the_demos() -> None:
    (block,) = section_blocks(DOC.read_text(), "A pod", "yaml")[:1]
    template, pod = (d for d in yaml.safe_load_all(block) if d)
    expected = claim_template("demo", QUAD_GPUS)
    assert template["kind"] == "ResourceClaimTemplate"
    assert template["metadata"]["name"] == template_name(QUAD_GPUS)
    assert template["spec"] == expected["spec"]
    source = {"resourceClaimTemplateName": template_name(QUAD_GPUS)}
    demo_pod = claim_pod(QUAD, "demo", source)["spec"]
    assert pod["metadata"]["name"] == QUAD
    for key in ("schedulerName", "resourceClaims"):
        assert pod["spec"][key] == demo_pod[key], key
    assert pod["spec"]["containers"][0]["resources"] == demo_pod["containers"][0]["resources"]


def test_the_quoted_messages_are_the_codes() -> None:
    text = " ".join(DOC.read_text().split())  # quotes may wrap across lines
    for message in (
        CANNOT_ALLOCATE,
        INVALID_POOLS,
        NOT_AVAILABLE,
        CLAIM_NOT_CREATED,
        DELETE_PROTECTION_FINALIZER,
    ):
        assert message in text, message
    assert f"reserved for {MAX_RESERVED_FOR} consumers" in text


def test_every_repository_file_named_exists() -> None:
    named = set(re.findall(r"`((?:scheduler|hack|manifests|tests)/[\w/.*-]+)`", DOC.read_text()))
    assert "scheduler/plugins/dynamic_resources.py" in named
    for path in named:
        matches = list(REPO_ROOT.glob(path))
        assert matches, path
