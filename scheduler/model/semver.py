"""Semantic versions (semver.org 2.0.0) as DRA's `version` device attributes carry them.

`parse_version` accepts exactly what the API server accepts for a version attribute
(`semverRe` and `validateDeviceAttributeVersionValue` in k8s.io/kubernetes@v1.37.2
pkg/apis/resource/validation/validation.go: MAJOR.MINOR.PATCH without leading zeros, optional
dot-separated pre-release and build identifiers, at most 64 characters). `Version.precedence`
orders versions as semver 2.0.0 does, which is what CEL's `semver(...).compareTo` gives for the
`Semver` values k8s.io/dynamic-resource-allocation@v0.37.2 cel/compile.go builds
(`getAttributeValue`, blang/semver); the build is ignored in ordering, and equality of two
attributes (a matchAttribute constraint) compares the text (structured/internal/incubating/
constraint.go: semver's minimal form makes that exact).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

VERSION_MAX_LENGTH = 64
"""DeviceAttributeMaxValueLength (k8s.io/api@v0.37.2 resource/v1/types.go)."""

_NUMERIC = r"(0|[1-9][0-9]*)"
_PRERELEASE_ID = r"(0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*)"
_BUILD_ID = r"[0-9a-zA-Z-]+"
_SEMVER_RE = re.compile(
    rf"{_NUMERIC}\.{_NUMERIC}\.{_NUMERIC}"
    rf"(?:-(?P<pre>{_PRERELEASE_ID}(?:\.{_PRERELEASE_ID})*))?"
    rf"(?:\+(?P<build>{_BUILD_ID}(?:\.{_BUILD_ID})*))?"
)


@dataclass(frozen=True)
class Version:
    """One version attribute value; `text` as published."""

    text: str
    major: int
    minor: int
    patch: int
    prerelease: tuple[int | str, ...] = ()
    build: str = ""

    def __str__(self) -> str:
        return self.text

    @property
    def precedence(self) -> tuple[int, int, int, int, tuple[tuple[int, int, str], ...]]:
        """A sort key in semver 2.0.0 precedence: a release sorts after its pre-releases;
        numeric identifiers sort numerically and before alphanumeric ones; a shorter list of
        identifiers sorts first when it is a prefix of the other."""
        identifiers = tuple(
            (0, part, "") if isinstance(part, int) else (1, 0, part) for part in self.prerelease
        )
        return (self.major, self.minor, self.patch, 0 if self.prerelease else 1, identifiers)


def parse_version(text: str) -> Version | None:
    """The `Version` of `text`, None when it is not a semver 2.0.0 version of at most
    `VERSION_MAX_LENGTH` characters."""
    if len(text) > VERSION_MAX_LENGTH:
        return None
    match = _SEMVER_RE.fullmatch(text)
    if match is None:
        return None
    pre = match["pre"]
    prerelease = tuple(int(p) if p.isdigit() else p for p in pre.split(".")) if pre else ()
    return Version(
        text=text,
        major=int(match[1]),
        minor=int(match[2]),
        patch=int(match[3]),
        prerelease=prerelease,
        build=match["build"] or "",
    )
