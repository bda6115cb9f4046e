"""Pod and node fields read by the PreEnqueue check and by NodePorts and NodeResourcesFit:
scheduling gates, host ports and extended (scalar) resources.

`scheduler.model.objects` calls these parsers from `parse_pod` / `parse_node`; they import only
`scheduler.model.extended_requests` of the scheduler. Like the rest of the parsing they never
raise: a malformed field becomes a `FieldError`-shaped (field, message) pair appended to `errors`
through the `report` callback, so the pod is reported and not scheduled until it is fixed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from scheduler.model.extended_requests import (
    ContainerRequests,
    container_extended_requests,
    is_dra_extended_resource_name,
)

BIND_ALL = "0.0.0.0"
"""kube-scheduler's wildcard host IP: an empty hostIP means this, and it overlaps every IP."""
DEFAULT_PROTOCOL = "TCP"
MAX_PORT = 65535
MAX_ECHO = 40
"""Characters of a bad value echoed in an error message."""

Report = Callable[[str, str], None]
"""report(field, message): records one problem with a field."""


@dataclass(frozen=True, order=True, slots=True)
class HostPort:
    """One host port a container binds on its node: (host IP, protocol, port), sanitized as
    kube-scheduler does (an empty IP is 0.0.0.0, an empty protocol is TCP)."""

    ip: str
    protocol: str
    port: int


def _echo(value: object) -> str:
    text = repr(value)
    return text if len(text) <= MAX_ECHO else text[: MAX_ECHO - 3] + "..."


def _items(raw: object) -> list[Any]:
    return list(raw) if isinstance(raw, list) else []


def scheduling_gates(spec: Mapping[str, Any], report: Report) -> tuple[str, ...]:
    """Names of `spec.schedulingGates`; any entry (even a malformed one) keeps the pod gated,
    as the API server counts entries, not valid names."""
    raw = spec.get("schedulingGates")
    if raw is None:
        return ()
    if not isinstance(raw, list):
        report("spec.schedulingGates", f"must be a list, got {type(raw).__name__}")
        return ("<invalid>",)
    names = []
    for index, gate in enumerate(raw):
        name = gate.get("name") if isinstance(gate, Mapping) else None
        if not isinstance(name, str) or not name:
            report(
                f"spec.schedulingGates[{index}].name", f"must be a non-empty string: {_echo(gate)}"
            )
            name = "<invalid>"
        names.append(name)
    return tuple(names)


def _is_sidecar(container: object) -> bool:
    return isinstance(container, Mapping) and container.get("restartPolicy") == "Always"


def host_ports(spec: Mapping[str, Any], report: Report) -> tuple[HostPort, ...]:
    """Host ports of the containers that run for the pod's whole life: every container and the
    sidecars (init containers with restartPolicy Always), as kube-scheduler's GetHostPorts.
    Ports with hostPort 0 or absent bind nothing on the host and are skipped."""
    found: list[HostPort] = []
    groups = (
        ("spec.initContainers", [c for c in _items(spec.get("initContainers")) if _is_sidecar(c)]),
        ("spec.containers", _items(spec.get("containers"))),
    )
    for where, containers in groups:
        for index, container in enumerate(containers):
            if not isinstance(container, Mapping):
                continue
            for number, port in enumerate(_items(container.get("ports"))):
                if not isinstance(port, Mapping) or port.get("hostPort") in (None, 0):
                    continue
                field = f"{where}[{index}].ports[{number}]"
                value = port.get("hostPort")
                if isinstance(value, bool) or not isinstance(value, int):
                    report(f"{field}.hostPort", f"must be an integer, got {_echo(value)}")
                    continue
                if not 0 < value <= MAX_PORT:
                    report(f"{field}.hostPort", f"must be 1-{MAX_PORT}, got {value}")
                    continue
                ip = port.get("hostIP") or BIND_ALL
                protocol = port.get("protocol") or DEFAULT_PROTOCOL
                found.append(HostPort(str(ip), str(protocol), value))
    return tuple(sorted(set(found)))


def scalar_resources(amounts: Mapping[str, int], known: Callable[[str], bool]) -> dict[str, int]:
    """The non-zero amounts of resources the fixed resource vector and the MIG columns do not
    hold (`known(name)` false): extended resources such as example.com/foo, hugepages-*."""
    return {name: amount for name, amount in sorted(amounts.items()) if amount and not known(name)}


class PodFeatures(NamedTuple):
    scheduling_gates: tuple[str, ...]
    host_ports: tuple[HostPort, ...]
    scalar: dict[str, int]
    extended: tuple[ContainerRequests, ...]


def pod_features(
    spec: Mapping[str, Any],
    requests: Mapping[str, int],
    known: Callable[[str], bool],
    report: Report,
) -> PodFeatures:
    """Everything this module parses from one pod: gates, host ports, extended requests (and,
    when there are any, each container's, `scheduler.model.extended_requests`)."""
    extended = any(
        amount and is_dra_extended_resource_name(name) for name, amount in requests.items()
    )
    return PodFeatures(
        scheduling_gates(spec, report),
        host_ports(spec, report),
        scalar_resources(requests, known),
        container_extended_requests(spec) if extended else (),
    )
