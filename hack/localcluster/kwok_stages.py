"""The pod lifecycle kwok plays on the fake nodes: kwok `Stage` documents for its config file.

kwok replaces all of its built-in pod stages as soon as its configuration carries one, so this
module states the whole pod lifecycle. Two kinds of pod are told apart by the annotation
`RUN_ANNOTATION`:

| pod                                  | bound                | deleted                           |
|--------------------------------------|----------------------|-----------------------------------|
| without the annotation (every test   | Running at once; a   | finalizers stripped, object gone  |
| before Kueue): kwok's default        | Job's pod Succeeded  | at once                           |
| with `RUN_ANNOTATION: until-deleted` | Running, and stays   | like a kubelet: containers killed |
|                                      | so                   | (exit 137), phase Failed, then    |
|                                      |                      | deleted with its finalizers kept  |

The second row is what Kueue needs: a Job's pods run until Kueue suspends the Job (quota taken
back) or the test deletes it, and the Job controller's `batch.kubernetes.io/job-tracking`
finalizer is removed by the Job controller after it has counted the pod, not by kwok.

Selector keys are jq expressions over the pod (kwok's syntax); a missing annotation is null, so
`DoesNotExist` matches it.
"""

from __future__ import annotations

from typing import Any

RUN_ANNOTATION = "local-cluster.gpu-scheduler.io/run"
"""Set to `UNTIL_DELETED` on a pod (or a Job's pod template) to keep it Running until deleted."""
UNTIL_DELETED = "until-deleted"

_ANNOTATION_KEY = f'.metadata.annotations["{RUN_ANNOTATION}"]'
_NOT_DELETED = {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"}
_DELETED = {"key": ".metadata.deletionTimestamp", "operator": "Exists"}
_DEFAULT_RUN = {"key": _ANNOTATION_KEY, "operator": "DoesNotExist"}
_UNTIL_DELETED = {"key": _ANNOTATION_KEY, "operator": "In", "values": [UNTIL_DELETED]}
_TERMINAL = ["Succeeded", "Failed"]

# Go templates kwok renders against the pod; `Now`, `NodeIPWith` and `PodIPWith` are kwok's
# template functions.
_RUNNING_STATUS = """\
{{ $now := Now }}
conditions:
- {type: Initialized, status: "True", lastTransitionTime: {{ $now | Quote }}}
- {type: Ready, status: "True", lastTransitionTime: {{ $now | Quote }}}
- {type: ContainersReady, status: "True", lastTransitionTime: {{ $now | Quote }}}
{{ range .spec.readinessGates }}
- {type: {{ .conditionType | Quote }}, status: "True", lastTransitionTime: {{ $now | Quote }}}
{{ end }}
containerStatuses:
{{ range .spec.containers }}
- {name: {{ .name | Quote }}, image: {{ .image | Quote }}, ready: true, restartCount: 0,
   started: true, state: {running: {startedAt: {{ $now | Quote }}}}}
{{ end }}
initContainerStatuses:
{{ range .spec.initContainers }}
{{ if eq .restartPolicy "Always" }}
- {name: {{ .name | Quote }}, image: {{ .image | Quote }}, ready: true, restartCount: 0,
   started: true, state: {running: {startedAt: {{ $now | Quote }}}}}
{{ else }}
- {name: {{ .name | Quote }}, image: {{ .image | Quote }}, ready: true, restartCount: 0,
   state: {terminated: {exitCode: 0, reason: Completed, startedAt: {{ $now | Quote }},
   finishedAt: {{ $now | Quote }}}}}
{{ end }}
{{ end }}
hostIP: {{ NodeIPWith .spec.nodeName | Quote }}
podIP: {{ PodIPWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) \
( or .metadata.name "" ) ( or .metadata.namespace "" ) | Quote }}
phase: Running
startTime: {{ $now | Quote }}
"""


def _ended_status(phase: str, exit_code: int, reason: str) -> str:
    """Every container terminated with `exit_code`/`reason`, the pod in `phase`."""
    return (
        """\
{{ $now := Now }}
conditions:
- {type: Ready, status: "False", reason: PodCompleted, lastTransitionTime: {{ $now | Quote }}}
- {type: ContainersReady, status: "False", reason: PodCompleted, \
lastTransitionTime: {{ $now | Quote }}}
containerStatuses:
{{ range .spec.containers }}
- {name: {{ .name | Quote }}, image: {{ .image | Quote }}, ready: false, restartCount: 0,
   started: false, state: {terminated: {exitCode: EXIT, reason: REASON,
   startedAt: {{ $now | Quote }}, finishedAt: {{ $now | Quote }}}}}
{{ end }}
phase: PHASE
""".replace("EXIT", str(exit_code))
        .replace("REASON", reason)
        .replace("PHASE", phase)
    )


def _stage(name: str, expressions: list[dict[str, Any]], next_: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": name},
        "spec": {
            "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
            "selector": {"matchExpressions": expressions},
            "next": next_,
        },
    }


def pod_stages() -> list[dict[str, Any]]:
    """Every pod Stage of the local cluster's kwok, in the order of the table above."""
    return [
        _stage(
            "pod-ready",
            [_NOT_DELETED, {"key": ".status.podIP", "operator": "DoesNotExist"}],
            {"statusTemplate": _RUNNING_STATUS},
        ),
        _stage(
            "pod-complete-job",
            [
                _DEFAULT_RUN,
                _NOT_DELETED,
                {"key": ".status.phase", "operator": "In", "values": ["Running"]},
                {"key": ".metadata.ownerReferences.[].kind", "operator": "In", "values": ["Job"]},
            ],
            {"statusTemplate": _ended_status("Succeeded", 0, "Completed")},
        ),
        _stage(
            "pod-delete",
            [_DEFAULT_RUN, _DELETED],
            {"finalizers": {"empty": True}, "delete": True},
        ),
        _stage(
            "pod-kill-on-delete",
            [
                _UNTIL_DELETED,
                _DELETED,
                {"key": ".status.phase", "operator": "NotIn", "values": _TERMINAL},
            ],
            {"statusTemplate": _ended_status("Failed", 137, "Error")},
        ),
        _stage(
            "pod-remove-terminated",
            [
                _UNTIL_DELETED,
                _DELETED,
                {"key": ".status.phase", "operator": "In", "values": _TERMINAL},
            ],
            {"delete": True},
        ),
    ]
