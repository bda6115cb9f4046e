"""Loading: defaults, the YAML file, environment variables and flags layered key by key, then
the tree built and validated; also the way back (`config_to_data`) and the key listing."""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Final, TypeVar

import yaml

from scheduler.config.errors import ConfigError, Invalid
from scheduler.config.flags import ENV_OVERRIDES, FLAG_BY_KEY, FLAGS
from scheduler.config.leader_election import default_identity
from scheduler.config.readers import ECHO_LIMIT, Reader, show
from scheduler.config.root import SchedulerConfig
from scheduler.config.tree import LEAF_READER, READER, SECTION, camel
from topology.text import clip, quote

T = TypeVar("T")

DEFAULT_SOURCE: Final = "defaults"
"""The source named in errors about a value nobody set."""
OVERRIDE_SOURCE: Final = "override"
"""The source named in errors about an override that no flag supplied."""

_Values = dict[str, tuple[object, str]]
"""Key path -> (raw value, source) after layering."""


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _unknown(key: str, known: list[str]) -> str:
    """The unknown-key reason: the closest known key as a suggestion, else all known keys. The
    key is echoed cut to `ECHO_LIMIT` characters (a key can be any size)."""
    guess = None
    if len(key) <= ECHO_LIMIT:  # no key that long is close to a known one
        folded = {name.lower(): name for name in known}
        guess = folded.get(camel(key).lower())
        if guess is None:
            close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
            guess = close[0] if close else None
    if guess is not None:
        return f"unknown key {quote(key, ECHO_LIMIT)}; did you mean {guess!r}?"
    return f"unknown key {quote(key, ECHO_LIMIT)} (known: {', '.join(sorted(known))})"


def _flatten(data: object, cls: type[Any], path: str, source: str, out: _Values) -> None:
    """Check the structure of `data` against `cls` and record each setting's raw value."""
    if data is None:
        return
    if not isinstance(data, Mapping):
        raise ConfigError(path, f"must be a mapping, got {show(data)}", source)
    specs = {camel(spec.name): spec for spec in dataclasses.fields(cls)}
    for key, value in data.items():
        if not isinstance(key, str):
            raise ConfigError(path, f"keys must be strings, got {show(key)}", source)
        full = _join(path, clip(key, ECHO_LIMIT))
        spec = specs.get(key)
        if spec is None:
            raise ConfigError(full, _unknown(key, list(specs)), source)
        section = spec.metadata.get(SECTION)
        if section is not None:
            _flatten(value, section, full, source, out)
        else:
            out[full] = (value, source)


def setting_keys(cls: type[Any] = SchedulerConfig, path: str = "") -> Iterator[str]:
    """Every setting's key path under `cls`, depth first in declaration order."""
    for spec in dataclasses.fields(cls):
        full = _join(path, camel(spec.name))
        section = spec.metadata.get(SECTION)
        if section is not None:
            yield from setting_keys(section, full)
        else:
            yield full


def config_to_data(config: object) -> dict[str, object]:
    """`config` (any section of the tree) as a YAML-ready mapping with camelCase keys.

    The inverse of loading: `config_from_data(config_to_data(c))` equals `c`. Paths become
    strings, tuples lists; every setting is present, defaults included.
    """
    data: dict[str, object] = {}
    for spec in dataclasses.fields(config):  # type: ignore[arg-type]
        value = getattr(config, spec.name)
        if dataclasses.is_dataclass(value):
            data[camel(spec.name)] = config_to_data(value)
        else:
            if isinstance(value, Path):
                value = str(value)
            elif isinstance(value, tuple):
                value = list(value)  # a YAML sequence (safe_dump writes no tuples)
            data[camel(spec.name)] = value
    return data


def _blame(error: ConfigError, path: str, values: _Values) -> ConfigError:
    """Prefix an invariant's error with its section path and the source of a key involved."""
    key = _join(path, error.key)
    if key in values:
        return ConfigError(key, error.reason, values[key][1])
    for related in error.related:
        if (full := _join(path, related)) in values:
            return ConfigError(key, f"{error.reason} (the default)", values[full][1])
    return ConfigError(key, error.reason, DEFAULT_SOURCE)


def _foreign(error: ValueError, cls: type[Any], path: str, values: _Values) -> ConfigError:
    """A section class's own `ValueError` with field names as keys, blamed on a key that was set."""
    original = str(error)
    found = {
        spec.name: match.start()
        for spec in dataclasses.fields(cls)
        if (match := re.search(rf"\b{spec.name}\b", original))
    }
    reason = original
    for name in found:
        reason = re.sub(rf"\b{name}\b", camel(name), reason)
    for name in sorted(found, key=found.__getitem__):
        if (key := _join(path, camel(name))) in values:
            return ConfigError(key, reason, values[key][1])
    return ConfigError(path, reason, DEFAULT_SOURCE)


def _build(
    cls: type[T], path: str, values: _Values, leaf_reader: Callable[[str], Reader] | None = None
) -> T:
    kwargs: dict[str, Any] = {}
    for spec in dataclasses.fields(cls):  # type: ignore[arg-type]
        key = _join(path, camel(spec.name))
        section = spec.metadata.get(SECTION)
        if section is not None:
            kwargs[spec.name] = _build(section, key, values, spec.metadata.get(LEAF_READER))
            continue
        if key not in values:
            continue
        raw, source = values[key]
        reader = spec.metadata.get(READER)
        if reader is None:
            assert leaf_reader is not None, f"{cls.__name__}.{spec.name} has no reader"
            reader = leaf_reader(spec.name)
        try:
            kwargs[spec.name] = reader(raw)
        except Invalid as error:
            raise ConfigError(key, str(error), source) from None
    try:
        return cls(**kwargs)
    except ConfigError as error:
        raise _blame(error, path, values) from None
    except ValueError as error:
        raise _foreign(error, cls, path, values) from None


def _env_values(env: Mapping[str, str], out: _Values) -> None:
    for variable, (key, parse) in ENV_OVERRIDES.items():
        text = env.get(variable, "")
        if not text:
            continue
        try:
            out[key] = (parse(text), variable)
        except Invalid as error:
            raise ConfigError(key, str(error), variable) from None


def _override_values(overrides: Mapping[str, object], out: _Values) -> None:
    known = list(setting_keys())
    for key, value in overrides.items():
        flag = FLAG_BY_KEY.get(key)
        source = flag.option if flag else OVERRIDE_SOURCE
        if key not in known:
            raise ConfigError(key, _unknown(key, known), source)
        if value is not None:
            out[key] = (value, source)


def config_from_data(
    data: object,
    source: str = "<data>",
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, object] | None = None,
) -> SchedulerConfig:
    """The configuration for an already parsed YAML document `data` (None = empty document).

    `source` names the document in error messages. Environment and overrides layer on top as in
    `load_config`. Raises `ConfigError` for every invalid input and nothing else.
    """
    env = env or {}
    values: _Values = {}
    _flatten(data, SchedulerConfig, "", source, values)
    _env_values(env, values)
    _override_values(overrides or {}, values)
    identity_key = "leaderElection.identity"
    if identity_key not in values:
        origin = "POD_NAME" if env.get("POD_NAME") else DEFAULT_SOURCE
        values[identity_key] = (default_identity(env), origin)
    return _build(SchedulerConfig, "", values)


def load_config(
    path: Path | None, env: Mapping[str, str], overrides: Mapping[str, object]
) -> SchedulerConfig:
    """Defaults, then the YAML file at `path` (None: no file), then `env`, then `overrides`.

    `overrides` maps key paths (`"leaderElection.enabled"`) to values of the setting's type; None
    values mean "not given". `env` is consulted only for `ENV_OVERRIDES` and `POD_NAME`. Raises
    `ConfigError` (never another exception) naming the file, variable or flag and the key path.
    """
    data: object = None
    source = DEFAULT_SOURCE
    if path is not None:
        source = str(path)
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as error:
            raise ConfigError("", f"cannot read: {error.strerror or error}", source) from None
        except UnicodeDecodeError:
            raise ConfigError("", "not UTF-8 text", source) from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as error:
            raise ConfigError("", f"not valid YAML: {error}", source) from None
        except (ValueError, TypeError, OverflowError, RecursionError) as error:
            raise ConfigError("", f"not a valid YAML value: {error}", source) from None
    return config_from_data(data, source, env, overrides)


def config_from_args(args: argparse.Namespace, env: Mapping[str, str]) -> SchedulerConfig:
    """The configuration for parsed `args` (from a parser given `add_config_flags`) and `env`."""
    overrides = {
        flag.key: value for flag in FLAGS if (value := getattr(args, flag.dest, None)) is not None
    }
    return load_config(getattr(args, "config", None), env, overrides)
