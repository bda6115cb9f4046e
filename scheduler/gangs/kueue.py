"""Kueue pod groups: plain pods that Kueue admits together, as a gang of gpu-scheduler.

Kueue's Pod integration makes one Workload of the pods labelled
`kueue.x-k8s.io/pod-group-name: <name>` (per namespace) and annotated
`kueue.x-k8s.io/pod-group-total-count: "<n>"`; it admits them together and then removes its
scheduling gate from each. There is no PodGroup object: the group is declared by its members.
Here it becomes the third source of the gang model (`scheduler.gangs.tracker`), beside the
scheduling.k8s.io/v1beta1 PodGroup and the scheduler-plugins coscheduling label:

- the gang key is "<namespace>/kueue.x-k8s.io/<name>" (`scheduler.model.objects.kueue_pod_group`);
- minCount is the total count: all of the group's pods are placed at once or none is;
- the gang may be tried once that many of its pods exist with no scheduling gate left (Kueue
  admitted the group and ungated them all), so a group being ungated one pod at a time is not
  tried, and reported unschedulable, with only some of its pods;
- a member whose total count is missing or not an integer in [1, `MAX_TOTAL_COUNT`], or members
  that disagree on it, make the group invalid: its pods wait, and each of our pods with a bad
  count gets an Event naming it and the annotation (`InvalidGroupReporter`).

`member_count` and `group_problems` are pure; they never raise and echo values bounded.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Callable, Mapping

import structlog

from scheduler.kube.events import WARNING, EventRecorder, ObjectRef
from scheduler.model.fields import FieldError
from scheduler.model.objects import KUEUE_PREFIX, PodInfo
from topology.text import clip, quote

log = structlog.get_logger("gpu-scheduler.kueue")

KUEUE_SOURCE = "kueue.x-k8s.io/pod-group"
"""`PodGroupInfo.source` of a Kueue pod group."""
TOTAL_COUNT_ANNOTATION = "kueue.x-k8s.io/pod-group-total-count"
TOTAL_COUNT_FIELD = f"metadata.annotations[{TOTAL_COUNT_ANNOTATION}]"
MAX_TOTAL_COUNT = 100_000
"""Largest total count accepted (a larger one can never be met and is reported)."""
MAX_PROBLEMS = 3
"""Problems of a group kept for its message (the first, by pod key)."""
MAX_REPORTED = 4096
"""Pods remembered as reported by `InvalidGroupReporter` (oldest first out)."""


def is_kueue_gang(gang: str) -> bool:
    """Whether the gang key ("ns/group") is a Kueue pod group's."""
    return gang.partition("/")[2].startswith(KUEUE_PREFIX)


def group_name(gang: str) -> str:
    """The Kueue group name of the gang key "ns/kueue.x-k8s.io/<name>"."""
    return gang.partition("/")[2].removeprefix(KUEUE_PREFIX)


def member_count(pod: PodInfo) -> int | FieldError:
    """The total count the pod declares, or the error naming its annotation."""
    raw = pod.annotations.get(TOTAL_COUNT_ANNOTATION)
    if raw is None:
        return FieldError(TOTAL_COUNT_FIELD, "is missing (the Kueue pod group's size)")
    text = raw.strip()
    if not (text.isascii() and text.isdigit()) or len(text) > len(str(MAX_TOTAL_COUNT)):
        return FieldError(TOTAL_COUNT_FIELD, f"must be an integer, got {quote(raw)}")
    count = int(text)
    if not 1 <= count <= MAX_TOTAL_COUNT:
        return FieldError(
            TOTAL_COUNT_FIELD, f"must be between 1 and {MAX_TOTAL_COUNT}, got {quote(raw)}"
        )
    return count


def group_problems(declared: Mapping[str, int | FieldError]) -> tuple[int, tuple[FieldError, ...]]:
    """The group's total count and its problems, from what each member declares (pod key ->
    count or error). Problems name the pods (at most `MAX_PROBLEMS`, the first by pod key); with
    any problem the count returned is 1. Linear in the members (called on their changes)."""
    bad: list[tuple[str, FieldError]] = []
    first_of: dict[int, str] = {}
    """Count -> the first pod key (in key order) declaring it."""
    for key, value in declared.items():
        if isinstance(value, FieldError):
            bad.append((key, value))
        elif value not in first_of or key < first_of[value]:
            first_of[value] = key
    problems = [
        FieldError(f"pod {clip(key.partition('/')[2])} {error.field}", error.message)
        for key, error in heapq.nsmallest(MAX_PROBLEMS, bad, key=lambda item: item[0])
    ]
    if len(first_of) > 1:
        said = ", ".join(
            f"pod {clip(key.partition('/')[2])} says {count}"
            for count, key in sorted(first_of.items())[:MAX_PROBLEMS]
        )
        problems.append(FieldError(TOTAL_COUNT_FIELD, f"the group's pods disagree: {said}"))
    if problems or not first_of:
        return 1, tuple(problems[:MAX_PROBLEMS])
    (count,) = first_of
    return count, ()


class InvalidGroupReporter:
    """`PodHandler`'s `gang_waiting`: before passing the hold on to `waiting`, reports a held
    pod whose own total count is bad (Warning Event `InvalidPodGroup` on the pod naming the
    annotation, and a log line), once per pod and problem."""

    def __init__(
        self, recorder: EventRecorder | None, waiting: Callable[[PodInfo, str], None]
    ) -> None:
        self.recorder = recorder
        self.waiting = waiting
        self._reported: OrderedDict[str, str] = OrderedDict()

    def __call__(self, pod: PodInfo, message: str) -> None:
        self.report(pod)
        self.waiting(pod, message)

    def report(self, pod: PodInfo) -> None:
        if not pod.pod_group.startswith(KUEUE_PREFIX):
            return
        value = member_count(pod)
        if not isinstance(value, FieldError):
            return
        mark = pod.uid or pod.key
        note = f"pod {clip(pod.name)}: {value}"
        if self._reported.get(mark) == note:
            return
        self._reported[mark] = note
        self._reported.move_to_end(mark)
        while len(self._reported) > MAX_REPORTED:
            self._reported.popitem(last=False)
        log.warning(
            "kueue_pod_group_invalid",
            pod=pod.key,
            group=clip(pod.pod_group.removeprefix(KUEUE_PREFIX)),
            error=str(value),
        )
        if self.recorder is not None:
            ref = ObjectRef("Pod", pod.name, pod.namespace, pod.uid)
            self.recorder.emit(ref, WARNING, "InvalidPodGroup", "Scheduling", note)
