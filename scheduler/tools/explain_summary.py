"""The pod-level line `explain` prints above its table, and the pods it refuses to rank.

- `fractional_extended(pod_obj)`: the first container resource of an extended resource
  (`nvidia.com/gpu`, any `domain/name` outside `kubernetes.io/`) whose quantity is not a whole
  number, as "spec.containers[0].resources.limits[nvidia.com/gpu]: \"3.5\"", or None. The API
  server refuses such a pod ("must be an integer": k8s.io/kubernetes@v1.37.2
  pkg/apis/core/validation/validation.go, `ValidateResourceQuantityValue` for every
  `helper.IsIntegerResourceName`, which includes the extended resources), so `explain` says so
  in one line instead of ranking it with the quantity rounded up.
- `summary_line(pod_obj, rows, too_big)`: one line on the pod as a whole, first match wins:
  1. bound (`spec.nodeName` set): the node and the GPUs it holds, and that the rows rank the
     nodes as if it were placed again with its own GPUs free;
  2. `too_big` (the daemon's message for a pod asking more GPUs than any node has, "... the
     largest node has 8.", `scheduler.core.cycle.larger_than_any_node`): that message;
  3. no node fits: "0/N nodes are available: " and each rejection reason with its count of
     nodes, as the daemon's FailedScheduling event counts them;
  4. else: how many nodes fit, and the best of them by score.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from scheduler.model.quantity import QuantityError, parse_quantity
from topology.occupancy import GPUS_ANNOTATION
from topology.text import clip, quote

CONTAINER_LISTS = ("initContainers", "containers")


def is_extended_resource(name: str) -> bool:
    """Kubernetes' `IsExtendedResourceName`, enough for a pod's resources: a `domain/name`
    outside the `kubernetes.io/` domain and not a quota's `requests.` name."""
    if "/" not in name or name.startswith("requests."):
        return False
    domain = name.partition("/")[0]
    return not (domain == "kubernetes.io" or domain.endswith(".kubernetes.io"))


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def fractional_extended(pod_obj: Mapping[str, Any]) -> str | None:
    """Where the pod asks for a fraction of an extended resource (see the module docstring)."""
    spec = _mapping(pod_obj.get("spec"))
    for list_name in CONTAINER_LISTS:
        containers = spec.get(list_name)
        for index, container in enumerate(containers if isinstance(containers, list) else []):
            resources = _mapping(_mapping(container).get("resources"))
            for kind in ("limits", "requests"):
                for name, value in _mapping(resources.get(kind)).items():
                    if not is_extended_resource(str(name)) or isinstance(value, bool):
                        continue
                    try:
                        amount = parse_quantity(value)
                    except (QuantityError, TypeError):
                        continue  # a malformed quantity: the pod's parser names it
                    if amount != amount.to_integral_value() or amount < Decimal(0):
                        return (
                            f"spec.{list_name}[{index}].resources.{kind}[{clip(str(name))}]: "
                            f"{quote(value)}"
                        )
    return None


def summary_line(
    pod_obj: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], too_big: str
) -> str:
    """One line on the pod as a whole, above the table (see the module docstring)."""
    metadata = _mapping(pod_obj.get("metadata"))
    key = f"{metadata.get('namespace', 'default')}/{metadata.get('name', '?')}"
    node = _mapping(pod_obj.get("spec")).get("nodeName")
    if node:
        gpus = _mapping(metadata.get("annotations")).get(GPUS_ANNOTATION)
        held = f" holding GPUs {gpus}" if gpus else ""
        return (
            f"pod {key} is bound to node {node}{held}; the rows show how each node would rank "
            "it if it were placed again, its own GPUs free"
        )
    if too_big:
        return too_big
    fit = [row for row in rows if row.get("feasible")]
    if not fit:
        counts = Counter(reason for row in rows for reason in row.get("reasons") or [])
        reasons = ", ".join(f"{n} {reason}" for reason, n in sorted(counts.items()))
        return f"0/{len(rows)} nodes are available: {reasons or 'no nodes'}."
    best = fit[0]
    score = best.get("score")
    shown = "-" if score is None else f"{score:g}"
    return f"{len(fit)}/{len(rows)} nodes fit pod {key}; the best is {best['node']} (score {shown})"
