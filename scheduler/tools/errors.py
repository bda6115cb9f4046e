"""Errors a command line user can fix, and the kubeconfig every command that talks to a cluster
needs.

A command raises `CommandError` with one line that names the problem and what to do; the entry
point (`scheduler.cli.main`) prints it as `gpu-scheduler <command>: <message>` and exits with
`exit_code`, without a traceback. Exit codes: `EXIT_USAGE` (2) for input the user gave wrongly (a
flag, a file), `EXIT_RUNTIME` (1) for a failure at run time (the API server refused or is down).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import yaml

EXIT_RUNTIME = 1
EXIT_USAGE = 2

KUBECONFIG_HINT = (
    "pass --kubeconfig FILE (explain and topology also read the KUBECONFIG environment variable; "
    "run does not), or run inside a cluster"
)
"""What to do when no API server configuration is found, appended to those errors."""
IN_CLUSTER_VARIABLE = "KUBERNETES_SERVICE_HOST"
"""Set by the kubelet in every container: without it there is no in-cluster configuration."""


class CommandError(Exception):
    """A problem the user can fix: `str(error)` is one line naming it and what to do."""

    def __init__(self, message: str, exit_code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def kubeconfig_from_env(env: Mapping[str, str]) -> Path | None:
    """The kubeconfig named by KUBECONFIG (its first existing file when it lists several, else its
    first entry), None when it is unset or empty. Only the tools read it; `run` does not."""
    entries = [entry for entry in env.get("KUBECONFIG", "").split(os.pathsep) if entry.strip()]
    if not entries:
        return None
    existing = [entry for entry in entries if Path(entry).is_file()]
    return Path((existing or entries)[0])


def check_kubeconfig(
    path: Path | str | None, env: Mapping[str, str], context: str | None = None
) -> None:
    """Raise `CommandError` (exit 2) unless `path` is a readable YAML file with a current-context
    (with `context` given: a context of that name), or is None inside a cluster
    (`IN_CLUSTER_VARIABLE` set in `env`). The client library's own errors for such files are
    misleading (a missing file reads as one without a current-context) or crash (an empty
    file)."""
    if path is None:
        if not env.get(IN_CLUSTER_VARIABLE):
            raise CommandError(
                f"no kubeconfig given and not running inside a cluster; {KUBECONFIG_HINT}"
            )
        return
    file = Path(path)
    if not file.exists():
        raise CommandError(f"kubeconfig {file}: no such file; {KUBECONFIG_HINT}")
    if not file.is_file() or not os.access(file, os.R_OK):
        raise CommandError(f"kubeconfig {file}: not a readable file; {KUBECONFIG_HINT}")
    try:
        document = yaml.safe_load(file.read_text())
    except (OSError, UnicodeDecodeError) as error:
        raise CommandError(f"kubeconfig {file}: cannot read: {error}; {KUBECONFIG_HINT}") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        raise CommandError(f"kubeconfig {file}{where}: not valid YAML; {KUBECONFIG_HINT}") from None
    if context is not None:
        contexts = document.get("contexts") if isinstance(document, dict) else None
        names = [c.get("name") for c in contexts or [] if isinstance(c, dict)]
        if context not in names:
            shown = ", ".join(str(n)[:60] for n in names[:8]) or "none"
            raise CommandError(
                f"kubeconfig {file}: no context {context[:100]!r} (it has: {shown}); "
                "list them with `kubectl config get-contexts`"
            )
        return
    if not isinstance(document, dict) or not document.get("current-context"):
        raise CommandError(
            f"kubeconfig {file}: not a kubeconfig with a current-context; {KUBECONFIG_HINT}"
        )
