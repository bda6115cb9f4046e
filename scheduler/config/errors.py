"""The configuration's error type, and the rejection a reader raises for one value."""

from __future__ import annotations


class ConfigError(ValueError):
    """A configuration value is missing its mark; the message says where it came from and why.

    `key` is the camelCase key path (`leaderElection.leaseDurationSeconds`; "" for the document
    itself), `source` the file, environment variable or flag that supplied the value (None when
    the configuration was built in code), `reason` the bare explanation. `related` names sibling
    keys an invariant involves, so the loader can point at whichever of them was set.
    """

    def __init__(
        self, key: str, reason: str, source: str | None = None, related: tuple[str, ...] = ()
    ) -> None:
        self.key = key
        self.reason = reason
        self.source = source
        self.related = related
        parts = [part for part in (source, key) if part]
        super().__init__(": ".join([*parts, reason]))


class Invalid(Exception):
    """A reader's rejection of one value; the loader turns it into a `ConfigError`.

    Raised by the readers of `scheduler.config.readers` (and the section modules' own) with the
    bare reason as its message (`must be ..., got ...`), without key or source: whoever called the
    reader (`scheduler.config.tree.check_settings`, the loader) knows the key path and the source
    and wraps the reason in a `ConfigError`. Never escapes the package.
    """
