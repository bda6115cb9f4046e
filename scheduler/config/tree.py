"""The dataclass tree: the field metadata that marks settings and sections, their YAML keys,
and the check every section's `__post_init__` runs on its own settings."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Final

from scheduler.config.errors import ConfigError, Invalid
from scheduler.config.readers import Reader, show

READER: Final = "reader"
"""Field metadata key of a setting: its `Reader` (set by `reads`)."""
SECTION: Final = "section"
"""Field metadata key of a section: its dataclass (set by `nested`)."""
LEAF_READER: Final = "leaf_reader"
"""Field metadata key of a section: the reader by field name of a class defined elsewhere, or
None (set by `nested`)."""


def reads(reader: Reader) -> dict[str, Any]:
    """Field metadata of a setting read with `reader`."""
    return {READER: reader}


def nested(cls: type[Any], leaf_reader: Callable[[str], Reader] | None = None) -> dict[str, Any]:
    """Field metadata of a section; `leaf_reader` reads, by name, the fields of a class defined
    elsewhere (it has no `reads` metadata of its own)."""
    return {SECTION: cls, LEAF_READER: leaf_reader}


def camel(name: str) -> str:
    """A Python field name as its YAML key: `lease_duration_seconds` -> `leaseDurationSeconds`."""
    first, *rest = name.split("_")
    return first + "".join(word[:1].upper() + word[1:] for word in rest)


def check_settings(instance: object) -> None:
    """Run every setting's reader on `instance` (converting in place); `ConfigError` on failure."""
    for spec in dataclasses.fields(instance):  # type: ignore[arg-type]
        reader = spec.metadata.get(READER)
        section = spec.metadata.get(SECTION)
        value = getattr(instance, spec.name)
        if reader is not None:
            try:
                object.__setattr__(instance, spec.name, reader(value))
            except Invalid as error:
                raise ConfigError(camel(spec.name), str(error)) from None
        elif section is not None:
            if not isinstance(value, section):
                raise ConfigError(
                    camel(spec.name), f"must be a {section.__name__}, got {show(value)}"
                )
            leaf_reader = spec.metadata.get(LEAF_READER)
            if leaf_reader is None:
                continue
            for leaf in dataclasses.fields(value):
                try:
                    leaf_reader(leaf.name)(getattr(value, leaf.name))
                except Invalid as error:
                    key = f"{camel(spec.name)}.{camel(leaf.name)}"
                    raise ConfigError(key, str(error)) from None
