"""What the offline image build needs to know about the repository's Dockerfile.

The offline build (`hack/image/build.py`) runs the Dockerfile itself through buildah, so the steps
are the same by construction; this module reads only what the build must decide around it: the
base image argument it overrides, the paths the `COPY` steps take from the build context (they key
the cache), and the final user and entrypoint (which the image checks run as).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path

BASE_IMAGE_ARG = "BASE_IMAGE"
"""The build argument that names the base image; `FROM ${BASE_IMAGE}` must use it."""


class DockerfileError(ValueError):
    """The Dockerfile lacks something the offline build relies on."""


@dataclass(frozen=True)
class Instruction:
    """One instruction: its keyword in upper case and the rest of its (joined) line."""

    keyword: str
    value: str


@dataclass(frozen=True)
class Recipe:
    """The parts of a Dockerfile the offline build and the image checks use."""

    default_base: str
    """The default of `ARG BASE_IMAGE=...` (what `docker build .` uses)."""
    copy_sources: tuple[str, ...]
    """Every source path of every `COPY` step, relative to the build context, in order."""
    user: str
    """The last `USER` (a numeric uid in this project)."""
    entrypoint: tuple[str, ...]
    """The exec form of the last `ENTRYPOINT`."""
    env: dict[str, str]
    """Every `ENV key=value`."""


def instructions(text: str) -> list[Instruction]:
    """The instructions of a Dockerfile: comments and blank lines dropped, continuation lines
    (a trailing backslash) joined."""
    result: list[Instruction] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        keyword, _, value = line.partition(" ")
        result.append(Instruction(keyword.upper(), value.strip()))
    if pending:
        raise DockerfileError("the Dockerfile ends inside a continued line")
    return result


def recipe(text: str) -> Recipe:
    """Read `text` (a Dockerfile). Raises `DockerfileError` when it does not take its base image
    from `ARG BASE_IMAGE=<default>` in its single `FROM`, or has no `USER` or exec-form
    `ENTRYPOINT`."""
    steps = instructions(text)
    default_base = ""
    copy_sources: list[str] = []
    user = ""
    entrypoint: tuple[str, ...] = ()
    env: dict[str, str] = {}
    froms = [step for step in steps if step.keyword == "FROM"]
    if len(froms) != 1 or froms[0].value not in (f"${{{BASE_IMAGE_ARG}}}", f"${BASE_IMAGE_ARG}"):
        raise DockerfileError(f"the Dockerfile needs exactly one `FROM ${{{BASE_IMAGE_ARG}}}`")
    for step in steps:
        if step.keyword == "ARG" and step.value.startswith(f"{BASE_IMAGE_ARG}="):
            default_base = step.value.partition("=")[2]
        elif step.keyword == "COPY":
            words = [word for word in shlex.split(step.value) if not word.startswith("--")]
            copy_sources.extend(words[:-1])
        elif step.keyword == "USER":
            user = step.value
        elif step.keyword == "ENTRYPOINT":
            try:
                parsed = json.loads(step.value)
            except json.JSONDecodeError:
                parsed = None
            if not isinstance(parsed, list) or not all(isinstance(w, str) for w in parsed):
                raise DockerfileError("ENTRYPOINT must be in exec form, a JSON list of strings")
            entrypoint = tuple(parsed)
        elif step.keyword == "ENV":
            for pair in shlex.split(step.value):
                key, _, value = pair.partition("=")
                env[key] = value
    if not default_base:
        raise DockerfileError(f"the Dockerfile needs `ARG {BASE_IMAGE_ARG}=<default image>`")
    if not user or not entrypoint:
        raise DockerfileError("the Dockerfile needs a USER and an exec-form ENTRYPOINT")
    return Recipe(default_base, tuple(copy_sources), user, entrypoint, env)


def read_recipe(path: Path) -> Recipe:
    """`recipe` of the Dockerfile at `path`."""
    return recipe(path.read_text())
