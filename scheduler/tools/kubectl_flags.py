"""kubectl's flags for the plugin `kubectl gpu-scheduler`, translated onto the `gpu-scheduler`
subcommands. Pure: an argument list, the environment and a kubeconfig reader in, an argument
list out; `scheduler.cli.kubectl_main` runs the result.

kubectl finds a plugin as an executable named `kubectl-<name>` on PATH, a dash of the command
written as an underscore in the file name (`kubectl gpu-scheduler` runs `kubectl-gpu_scheduler`,
k8s.io/kubectl@v0.37.2 pkg/cmd/plugin.go, `HandlePluginCommand`), and hands it every argument
after the plugin's name: kubectl parses none of its own flags for a plugin, so the plugin reads
them. `translate` takes, anywhere in the arguments:

    --kubeconfig FILE      default: the KUBECONFIG environment variable (its first existing
                           file), else ~/.kube/config when it exists (kubectl's defaults)
    --context NAME         a context of that kubeconfig instead of its current-context
    -n, --namespace NS     explain: the namespace of a pod or PodGroup named without one
                           (default: the context's namespace, else "default");
                           idle-report: only that namespace (default: every namespace)
    -A, --all-namespaces   idle-report: every namespace (its default)
    -o, --output FORMAT    table, wide, json, yaml (`scheduler.tools.output`)

as `--flag VALUE`, `--flag=VALUE`, and for the short ones also `-nVALUE`, `-n=VALUE`. The rest
goes to the subcommand unchanged, except that `explain` also takes the pod as its first
positional argument (`kubectl gpu-scheduler explain my-pod -n team-a`), and a `--pod` or
`--pod-group` without a namespace gets one. Flags the chosen subcommand has no use for (`-n`
for `topology`, say) raise `CommandError`, as does a flag without its value.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scheduler.tools.errors import CommandError, kubeconfig_from_env
from scheduler.tools.output import OUTPUT_FORMATS

PLUGIN_NAME = "kubectl gpu-scheduler"
PLUGIN_EXECUTABLE = "kubectl-gpu_scheduler"
DEFAULT_NAMESPACE = "default"
LONG_FLAGS = {
    "--kubeconfig": "kubeconfig",
    "--context": "context",
    "--namespace": "namespace",
    "--output": "output",
}
SHORT_FLAGS = {"-n": "namespace", "-o": "output"}
ALL_NAMESPACES = ("-A", "--all-namespaces")
WITH_OUTPUT = ("explain", "idle-report", "simulate")
"""Subcommands that take -o."""
WITH_CLUSTER = ("explain", "idle-report", "topology")
"""Subcommands that read a cluster, so take --kubeconfig and --context."""
EXPLAIN_VALUE_FLAGS = ("--pod", "--pod-group", "--pod-file", "--cluster", "--config")
"""explain's flags that take a value (which is then not the positional pod name)."""
USAGE = f"""usage: {PLUGIN_NAME} COMMAND [ARGS] [kubectl flags]

The gpu-scheduler command line as a kubectl plugin. Commands:
  explain POD | --pod [NS/]NAME | --pod-group [NS/]NAME   every node's verdict and score
  idle-report [--prometheus-url URL]                       pods holding idle GPUs
  topology discover [--file TOPO.txt] [--node NAME --patch] NVLink domains of a node
  simulate ..., version                                    as `gpu-scheduler`

kubectl flags:
  --kubeconfig FILE     default $KUBECONFIG, else ~/.kube/config
  --context NAME        default the kubeconfig's current-context
  -n, --namespace NS    explain: of the pod (default: the context's); idle-report: only this one
  -A, --all-namespaces  idle-report: every namespace (the default)
  -o, --output FORMAT   table, wide, json or yaml

`{PLUGIN_NAME} COMMAND --help` shows a command's own flags."""

KubeconfigReader = Callable[[Path], Any]
"""Reads a kubeconfig file into its YAML document (`yaml.safe_load` of its text)."""


@dataclass
class KubectlFlags:
    """kubectl's flags found in the arguments, and everything else in order."""

    kubeconfig: str | None = None
    context: str | None = None
    namespace: str | None = None
    output: str | None = None
    all_namespaces: bool = False
    rest: list[str] = field(default_factory=list)


def split_flags(argv: Sequence[str]) -> KubectlFlags:
    """kubectl's flags out of `argv` (see the module docstring); arguments after `--` stay."""
    found = KubectlFlags()
    args = list(argv)
    index = 0
    while index < len(args):
        arg = args[index]
        index += 1
        if arg == "--":
            found.rest += args[index - 1 :]
            break
        if arg in ALL_NAMESPACES:
            found.all_namespaces = True
            continue
        name, value = _flag(arg)
        if name is None:
            found.rest.append(arg)
            continue
        if value is None:
            if index >= len(args):
                raise CommandError(f"flag {arg} needs a value")
            value, index = args[index], index + 1
        if not value:
            raise CommandError(f"flag {arg} needs a value")
        setattr(found, name, value)
    if found.output is not None and found.output not in OUTPUT_FORMATS:
        raise CommandError(
            f"-o {found.output[:40]!r}: not a known output format; give one of "
            + ", ".join(OUTPUT_FORMATS)
        )
    return found


def _flag(arg: str) -> tuple[str | None, str | None]:
    """(the KubectlFlags field of `arg`, its attached value or None) or (None, None)."""
    head, equals, value = arg.partition("=")
    if head in LONG_FLAGS:
        return LONG_FLAGS[head], value if equals else None
    short = arg[:2]
    if short in SHORT_FLAGS:
        attached = arg[2:].removeprefix("=")
        return SHORT_FLAGS[short], attached or None
    return None, None


def default_kubeconfig(flag: str | None, env: Mapping[str, str], home: Path) -> Path | None:
    """The kubeconfig kubectl would use: the flag, else KUBECONFIG (its first existing file),
    else `home`/.kube/config when it exists; None (in-cluster) otherwise."""
    if flag:
        return Path(flag)
    from_env = kubeconfig_from_env(env)
    if from_env is not None:
        return from_env
    config = home / ".kube" / "config"
    return config if config.is_file() else None


def context_namespace(document: Any, context: str | None) -> str:
    """The namespace of kubeconfig `document`'s context `context` (default its
    current-context); "default" when the context names none or cannot be found."""
    if not isinstance(document, Mapping):
        return DEFAULT_NAMESPACE
    name = context or document.get("current-context")
    contexts = document.get("contexts")
    for entry in contexts if isinstance(contexts, list) else []:
        if isinstance(entry, Mapping) and entry.get("name") == name:
            body = entry.get("context")
            namespace = body.get("namespace") if isinstance(body, Mapping) else None
            return str(namespace) if namespace else DEFAULT_NAMESPACE
    return DEFAULT_NAMESPACE


@dataclass(frozen=True)
class Environment:
    """What the translation reads besides the arguments: the environment variables, the home
    folder (for ~/.kube/config), and how to read a kubeconfig."""

    env: Mapping[str, str]
    home: Path
    read_kubeconfig: KubeconfigReader


def translate(argv: Sequence[str], where: Environment) -> list[str]:
    """The `gpu-scheduler` arguments for `kubectl gpu-scheduler ARGV` (module docstring)."""
    flags = split_flags(argv)
    if not flags.rest:
        return []
    command = flags.rest[0]
    _refuse_unused(command, flags)
    kubeconfig = default_kubeconfig(flags.kubeconfig, where.env, where.home)
    out = list(flags.rest)
    if command == "explain":
        namespace = flags.namespace or _namespace_of(kubeconfig, flags.context, where)
        out = ["explain", *_explain_args(flags.rest[1:], namespace)]
    elif command == "idle-report" and flags.namespace and not flags.all_namespaces:
        out += ["--namespace", flags.namespace]
    if command in WITH_CLUSTER:
        if kubeconfig is not None:
            out += ["--kubeconfig", str(kubeconfig)]
        if flags.context:
            out += ["--context", flags.context]
    if flags.output is not None:
        out += ["--output", flags.output]
    return out


def _refuse_unused(command: str, flags: KubectlFlags) -> None:
    unused = []
    if flags.output is not None and command not in WITH_OUTPUT:
        unused.append("-o")
    if flags.namespace is not None and command not in ("explain", "idle-report"):
        unused.append("-n")
    if flags.all_namespaces and command != "idle-report":
        unused.append("-A")
    if (flags.kubeconfig or flags.context) and command not in WITH_CLUSTER:
        unused.append("--kubeconfig/--context")
    if unused:
        raise CommandError(f"{command[:40]} takes no {', '.join(unused)}")


def _namespace_of(kubeconfig: Path | None, context: str | None, where: Environment) -> str:
    """The context's namespace, read only from an existing kubeconfig ("default" otherwise:
    explain itself then reports the kubeconfig's problem)."""
    if kubeconfig is None or not kubeconfig.is_file():
        return DEFAULT_NAMESPACE
    try:
        return context_namespace(where.read_kubeconfig(kubeconfig), context)
    except Exception:  # unreadable or not YAML: explain's own check names the problem
        return DEFAULT_NAMESPACE


def _explain_args(args: Sequence[str], namespace: str) -> list[str]:
    """explain's arguments with a positional pod turned into `--pod NS/NAME` and a namespace
    given to a `--pod` or `--pod-group` named without one."""
    out: list[str] = []
    positional: list[str] = []
    index = 0
    while index < len(args):
        arg = args[index]
        index += 1
        head, equals, value = arg.partition("=")
        if head in ("--pod", "--pod-group") and (equals or index < len(args)):
            if not equals:
                value, index = args[index], index + 1
            out += [head, _qualified(value, namespace)]
        elif arg in EXPLAIN_VALUE_FLAGS and index < len(args):
            out += [arg, args[index]]
            index += 1
        elif arg.startswith("-") or positional:
            out.append(arg)  # explain's own flags; a second positional: explain refuses it
        else:
            positional.append(arg)
            out += ["--pod", _qualified(arg, namespace)]
    return out


def _qualified(name: str, namespace: str) -> str:
    return name if "/" in name else f"{namespace}/{name}"
