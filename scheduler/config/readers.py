"""Readers of single setting values: each converts one raw value or raises `Invalid`.

Also the helpers that shape their reasons (`show`, `fmt`) and `split_host_port`, which the daemon
uses to open its metrics server.
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

from scheduler.config.errors import Invalid
from topology.text import quote

Reader = Callable[[object], Any]
"""Converts one raw value to the setting's type, or raises `Invalid` with a reason."""

LOG_LEVELS: Final = ("debug", "info", "warning", "error")
"""The values of `logLevel` (and of `--log-level`), least severe first."""

ECHO_LIMIT = 60
"""Characters of a configured value or key echoed in an error."""


def show(value: object) -> str:
    """`value` as echoed in a reason: "a mapping", "a list", else quoted and cut to `ECHO_LIMIT`
    characters (a configured value can be any size)."""
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple | set | frozenset):
        return "a list"
    return quote(value, ECHO_LIMIT)


def fmt(number: float) -> str:
    """A number in a reason, shortest form (`10.0` -> "10", `0.5` -> "0.5")."""
    return f"{number:g}"


def finite(value: object, what: str) -> float:
    """`value` as a finite float (ints accepted, bools not), else `Invalid` saying it must be
    `what` (a phrase such as "a number of seconds > 0")."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise Invalid(f"must be {what}, got {show(value)}")
    try:
        number = float(value)
    except OverflowError:
        raise Invalid(f"must be {what}, got a number too large") from None
    if not math.isfinite(number):
        raise Invalid(f"must be {what}, got {show(value)}")
    return number


def number(minimum: float | None = None) -> Reader:
    """A finite float (ints accepted), at least `minimum` when given."""
    what = "a number" if minimum is None else f"a number >= {fmt(minimum)}"

    def read(value: object) -> float:
        number = finite(value, what)
        if minimum is not None and number < minimum:
            raise Invalid(f"must be {what}, got {show(value)}")
        return number

    return read


def positive_seconds(value: object) -> float:
    """A duration: a finite number of seconds > 0, as a float."""
    number = finite(value, "a number of seconds > 0")
    if number <= 0:
        raise Invalid(f"must be a number of seconds > 0, got {show(value)}")
    return number


def fraction(value: object) -> float:
    """A finite number in [0, 1], as a float."""
    number = finite(value, "a number between 0 and 1")
    if not 0.0 <= number <= 1.0:
        raise Invalid(f"must be a number between 0 and 1, got {show(value)}")
    return number


def integer(minimum: int, maximum: int | None = None) -> Reader:
    """An int (not a bool) in `minimum..maximum`."""
    what = f"an integer >= {minimum}" if maximum is None else f"an integer {minimum}..{maximum}"

    def read(value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise Invalid(f"must be {what}, got {show(value)}")
        if value < minimum or (maximum is not None and value > maximum):
            raise Invalid(f"must be {what}, got {show(value)}")
        return value

    return read


def boolean(value: object) -> bool:
    """A YAML boolean; strings such as "true" are refused."""
    if not isinstance(value, bool):
        raise Invalid(f"must be true or false, got {show(value)}")
    return value


def non_empty_string(value: object) -> str:
    """A string with at least one non-blank character, returned unchanged."""
    if not isinstance(value, str) or not value.strip():
        raise Invalid(f"must be a non-empty string, got {show(value)}")
    return value


_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")
_DNS_LABEL_RE = re.compile(_DNS_LABEL)


def dns_subdomain(value: object) -> str:
    """Kubernetes' DNS-1123 subdomain, the rule for object names and a pod's schedulerName."""
    text = non_empty_string(value)
    if len(text) > 253 or not _DNS_SUBDOMAIN.fullmatch(text):
        raise Invalid(
            "must be a DNS-1123 subdomain (lower-case letters, digits, '-' and '.', starting and "
            f"ending with a letter or digit, at most 253 characters), got {show(value)}"
        )
    return text


def dns_label(value: object) -> str:
    """Kubernetes' DNS-1123 label, the rule for namespace names."""
    text = non_empty_string(value)
    if len(text) > 63 or not _DNS_LABEL_RE.fullmatch(text):
        raise Invalid(
            "must be a DNS-1123 label (lower-case letters, digits and '-', starting and ending "
            f"with a letter or digit, at most 63 characters), got {show(value)}"
        )
    return text


def optional_path(value: object) -> Path | None:
    """A file path (a non-blank string or a `Path`) as a `Path`; None stays None."""
    if value is None or isinstance(value, Path):
        return value
    if not isinstance(value, str) or not value.strip():
        raise Invalid(f"must be a file path or null, got {show(value)}")
    return Path(value)


_HOSTNAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?")


def split_host_port(address: str) -> tuple[str, int]:
    """`host:port` -> (host, port); IPv6 hosts come bracketed (`[::]:10261` -> ("::", 10261)).

    The host may be empty (all interfaces). Raises `ValueError` with a reason otherwise.
    """
    host, sep, port_text = address.rpartition(":")
    if not sep:
        raise ValueError("no ':port'")
    if not port_text.isascii() or not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise ValueError("the port must be 1..65535")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"{host!r} is not an IPv6 address") from None
    elif ":" in host:
        raise ValueError("IPv6 hosts must be in brackets, e.g. [::]:10261")
    elif host and not _HOSTNAME.fullmatch(host):
        raise ValueError(f"{host!r} is not a host name or IP address")
    return host, int(port_text)


def host_port(value: object) -> str:
    """A `host:port` address that `split_host_port` accepts, returned unchanged."""
    if not isinstance(value, str):
        raise Invalid(f"must be host:port, got {show(value)}")
    try:
        split_host_port(value)
    except ValueError as error:
        raise Invalid(f"must be host:port ({error}), got {show(value)}") from None
    return value


def listen_host(value: object) -> str:
    """A host name or IP address to listen on (IPv6 without brackets); "" is all interfaces."""
    if value == "":
        return ""
    if isinstance(value, str):
        try:
            ipaddress.ip_address(value)
            return value
        except ValueError:
            if _HOSTNAME.fullmatch(value):
                return value
    raise Invalid(f"must be a host name or IP address, got {show(value)}")
