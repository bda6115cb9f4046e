"""PodWatch: a pod is parsed at most once per informer event, also when the Reclaimer tracks it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

import pytest

from scheduler.core import handlers
from scheduler.core.handlers import PodHandler
from scheduler.model import objects
from scheduler.model.objects import PodInfo, parse_pod
from scheduler.postfilter import preemptors
from scheduler.postfilter.pod_watch import PodWatch
from tests.unit.scheduler.builders import cluster, make_node
from tests.unit.scheduler.core_api_double import harness
from tests.unit.scheduler.reclaim_doubles import make_rig, pending_pod


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Pod name -> times `parse_pod` parsed it, wherever the watch path calls it."""
    counted: Counter[str] = Counter()

    def counting(obj: Mapping[str, Any]) -> PodInfo:
        counted[obj["metadata"]["name"]] += 1
        return objects.parse_pod(obj)

    monkeypatch.setattr(handlers, "parse_pod", counting)
    monkeypatch.setattr(preemptors, "parse_pod", counting)
    return counted


def test_a_tracked_preemptor_is_parsed_once_per_event(
    monkeypatch: pytest.MonkeyPatch, parses: Counter[str]
) -> None:
    h = harness(cluster(make_node("a", gpus=1, domains="0")))
    rig = make_rig(monkeypatch, h.cache)
    watch = PodWatch(PodHandler(h.context, h.queue), rig.reclaimer)
    pending = pending_pod()
    rig.reclaimer.nominate(parse_pod(pending), "a")  # reclaim made room: the pod is tracked
    watch.on_add(pending)
    assert parses["preemptor"] == 1
    assert rig.reclaimer.nominated_node(parse_pod(pending)) == "a"
    status_only = {**pending, "status": {"phase": "Pending", "conditions": []}}
    watch.on_update(pending, status_only)  # the handler has no use for it; the Reclaimer has
    assert parses["preemptor"] == 2
    bound = {**pending, "spec": {**pending["spec"], "nodeName": "a"}}
    watch.on_update(status_only, bound)
    assert parses["preemptor"] == 3
    assert rig.reclaimer.nominated_node(parse_pod(pending)) is None  # bound: nomination gone
    assert h.cache.pods["default/preemptor"].node == "a"
    watch.on_update(bound, {**bound, "status": {"phase": "Running"}})  # untracked, status only
    assert parses["preemptor"] == 3
