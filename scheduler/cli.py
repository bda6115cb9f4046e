"""The `gpu-scheduler` command line.

gpu-scheduler run [--config FILE] [flags]        the scheduler daemon
gpu-scheduler explain ...                        every node's verdict and score for a pod
gpu-scheduler topology discover [...]            NVLink domains from `nvidia-smi topo -m`
gpu-scheduler reclaim replay ...                 the idle verdict over recorded samples
gpu-scheduler simulate ... [--plot FILE.png]     placement policies over a cluster trace
gpu-scheduler idle-report [--prometheus-url URL]  pods holding idle GPUs, and their reclaim policy
                          [--plot FILE.png]       (--plot: a figure, `scheduler.tools.plots`)
gpu-scheduler version

kubectl gpu-scheduler COMMAND ...                 the same, as a kubectl plugin (`kubectl_main`,
                                                 the executable `kubectl-gpu_scheduler`): kubectl's
                                                 --kubeconfig, --context, -n, -o translated by
                                                 `scheduler.tools.kubectl_flags`

Errors the user can fix (a missing kubeconfig, a bad file, a pod that does not exist, an API server
that cannot be reached) end the command with ONE line on stderr, `gpu-scheduler <command>: <what
is wrong>; <what to do>`, and exit code 2 (usage: flags, files, configuration) or 1 (run time: the
API server refused or did not answer); `describe_error` is the one mapping from exception to line.
Anything else is a bug and keeps its traceback.

A reader that stops early (`gpu-scheduler explain ... | head -3`) ends the command quietly with
exit code 141, what a shell reports for a process killed by SIGPIPE (128 + 13), as `cat` or `ls`
would end; see `main`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import aiohttp
import yaml
from kubernetes_asyncio.client import ApiException
from kubernetes_asyncio.config import ConfigException

from scheduler.config import ConfigError, add_config_flags, config_from_args
from scheduler.kube.apierrors import APIError
from scheduler.tools.errors import (
    EXIT_RUNTIME,
    EXIT_USAGE,
    KUBECONFIG_HINT,
    CommandError,
    check_kubeconfig,
)

RUN_DESCRIPTION = (
    "Run the scheduler daemon. Its kubeconfig comes from --kubeconfig, the configuration file or "
    "GPU_SCHEDULER_KUBECONFIG, never from KUBECONFIG; without one it uses the in-cluster "
    "service account."
)
EXIT_BROKEN_PIPE = 141
"""Exit code when stdout's reader has gone: 128 + SIGPIPE (13), as a shell reports that death."""
MESSAGE_LIMIT = 400
"""Characters of an error line; longer messages (an API server's, a parser's) are cut."""


def package_version() -> str:
    """The installed distribution's version, or "unknown" when running from a bare source tree."""
    try:
        return version("gpu-scheduler")
    except PackageNotFoundError:
        return "unknown"


def build_parser(prog: str = "gpu-scheduler") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Kubernetes secondary scheduler for GPU pods: NVLink-domain-aware placement "
        "and reclaim of measurably idle GPUs.",
    )
    parser.add_argument("--version", action="version", version=f"gpu-scheduler {package_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.add_parser("version", help="print the version and exit")
    run = commands.add_parser("run", help="run the scheduler daemon", description=RUN_DESCRIPTION)
    add_config_flags(run)
    from reclaim.replay import add_reclaim_parser
    from scheduler.tools.explain import add_explain_parser
    from scheduler.tools.idle_report import add_idle_report_parser
    from scheduler.tools.simulate import add_simulate_parser
    from scheduler.tools.topology_cli import add_topology_parser

    add_explain_parser(commands)
    add_topology_parser(commands)
    add_reclaim_parser(commands)
    add_simulate_parser(commands)
    add_idle_report_parser(commands)
    return parser


async def run_daemon(args: argparse.Namespace) -> int:
    from scheduler.daemon import Daemon
    from scheduler.kube.client import api_client_for
    from scheduler.logging import configure_logging

    settings = config_from_args(args, os.environ)
    check_kubeconfig(settings.kubeconfig, os.environ)
    configure_logging(settings.log_level)
    kubeconfig = str(settings.kubeconfig) if settings.kubeconfig else None
    async with await api_client_for(kubeconfig) as api_client:
        daemon = Daemon(settings, api_client)
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, daemon.stop)
        await daemon.run()
    return 0


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= MESSAGE_LIMIT else line[: MESSAGE_LIMIT - 3] + "..."


def _yaml_message(error: yaml.YAMLError) -> str:
    mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None) or str(error)
    if mark is None:
        return f"not valid YAML: {problem}"
    return f"{mark.name}:{mark.line + 1}:{mark.column + 1}: not valid YAML: {problem}"


def describe_error(error: BaseException) -> tuple[str, int] | None:
    """The one-line message and exit code for an error the user can act on; None for anything
    else (a bug, which keeps its traceback). The message names the problem and what to do."""
    message: str
    code: int
    if isinstance(error, CommandError):
        message, code = str(error), error.exit_code
    elif isinstance(error, ConfigError):
        message, code = f"invalid configuration: {error}", EXIT_USAGE
    elif isinstance(error, ConfigException):
        message = f"no usable API server configuration ({error}); {KUBECONFIG_HINT}"
        code = EXIT_USAGE
    elif isinstance(error, yaml.YAMLError):
        message, code = _yaml_message(error), EXIT_USAGE
    elif isinstance(error, APIError) and error.transport:
        message = f"cannot reach the API server: {error}; check the server in the kubeconfig"
        code = EXIT_RUNTIME
    elif isinstance(error, APIError):
        message, code = f"the API server refused the request: {error}", EXIT_RUNTIME
    elif isinstance(error, ApiException):
        message = f"the API server refused the request: {error.status} {error.reason}"
        code = EXIT_RUNTIME
    elif isinstance(error, aiohttp.ClientError | TimeoutError):
        message = (
            f"cannot reach the API server: {error or type(error).__name__}; "
            "check the server in the kubeconfig"
        )
        code = EXIT_RUNTIME
    elif isinstance(error, OSError) and error.filename is not None:
        message = f"{error.filename}: {error.strerror or error}"
        code = EXIT_USAGE
    else:
        return None
    return _one_line(message), code


def _deepest_parser(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> argparse.ArgumentParser:
    """The (sub)parser of the command `args` chose, e.g. `run`'s, or `topology discover`'s."""
    current = parser
    while True:
        chooser = next(
            (a for a in current._actions if isinstance(a, argparse._SubParsersAction)), None
        )
        name = getattr(args, chooser.dest, None) if chooser is not None else None
        if chooser is None or name not in chooser.choices:
            return current
        current = chooser.choices[name]


def _dispatch(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if args.command == "version":
        print(package_version())
        return 0
    if args.command == "run":
        return asyncio.run(run_daemon(args))
    handler: Callable[[argparse.Namespace], int] | None = getattr(args, "handler", None)
    if handler is not None:
        return handler(args)
    parser.print_help(sys.stderr)
    return EXIT_USAGE


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's final flush of what is still buffered
    does not meet the closed pipe again (and print "Exception ignored ... BrokenPipeError")."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # a stdout without a file descriptor (a test's capture)
        pass


def main(argv: list[str] | None = None, prog: str = "gpu-scheduler") -> int:
    """Run one command; its exit code. When stdout is a pipe whose reader has closed it
    (`... | head -3`), the command ends quietly with EXIT_BROKEN_PIPE (141, as after SIGPIPE)
    instead of a BrokenPipeError traceback: Python ignores SIGPIPE, so the write raises.
    `prog` names the command in usage and error lines."""
    try:
        try:
            return _main(argv, prog)
        finally:
            sys.stdout.flush()  # inside the try: the pipe's error is raised here, not at exit
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE


def kubectl_main(argv: list[str] | None = None) -> int:
    """The kubectl plugin `kubectl gpu-scheduler` (executable `kubectl-gpu_scheduler`): kubectl's
    flags translated onto a subcommand (`scheduler.tools.kubectl_flags`), then `main`. No
    command, `-h` or `--help` prints the plugin's usage (exit 2 without a command, else 0); a
    flag the translation cannot use is one line on stderr and exit code 2."""
    from scheduler.tools.kubectl_flags import PLUGIN_NAME, USAGE, Environment, translate

    arguments = sys.argv[1:] if argv is None else argv
    try:
        if not arguments or arguments[0] in ("-h", "--help"):
            print(USAGE, file=sys.stdout if arguments else sys.stderr)
            return 0 if arguments else EXIT_USAGE
        where = Environment(os.environ, Path.home(), _read_yaml)
        translated = translate(arguments, where)
    except CommandError as error:
        print(f"{PLUGIN_NAME}: {_one_line(str(error))}", file=sys.stderr)
        return error.exit_code
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    return main(translated, PLUGIN_NAME)


def _read_yaml(path: Path) -> object:
    return yaml.safe_load(path.read_text())


def _main(argv: list[str] | None, prog: str = "gpu-scheduler") -> int:
    parser = build_parser(prog)
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # the chosen command's usage, not the top level's
        _deepest_parser(parser, args).error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        return _dispatch(parser, args)
    except Exception as error:
        described = describe_error(error)
        if described is None:
            raise
        message, code = described
        print(f"{_deepest_parser(parser, args).prog}: {message}", file=sys.stderr)
        return code


if __name__ == "__main__":
    sys.exit(main())
