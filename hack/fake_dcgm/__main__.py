"""Command line: ``python -m hack.fake_dcgm --kubeconfig PATH --listen HOST:PORT [...]``.

Logs JSON lines to stderr; SIGTERM or SIGINT stop it cleanly (exit status 0). Exit status 2 for
bad arguments, 1 when the trace, the kubeconfig or the listen address cannot be used.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

import structlog
from kubernetes_asyncio.config import ConfigException

from hack.fake_dcgm.server import Options, serve
from hack.fake_dcgm.trace import TraceError


def _listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0: {text!r}")
    return value


def parse_args(argv: Sequence[str] | None = None) -> Options:
    """Parse the command line into :class:`~hack.fake_dcgm.server.Options`."""
    parser = argparse.ArgumentParser(
        prog="python -m hack.fake_dcgm",
        description="Fake dcgm-exporter for kwok fake GPU nodes.",
    )
    parser.add_argument("--kubeconfig", type=Path, required=True, help="kubeconfig of the cluster")
    parser.add_argument("--listen", type=_listen, default=("127.0.0.1", 9400), help="HOST:PORT")
    parser.add_argument("--trace", type=Path, help="GPU trace CSV for trace: usage shapes")
    parser.add_argument(
        "--profiling", action="store_true", help="serve DCGM_FI_PROF_GR_ENGINE_ACTIVE everywhere"
    )
    parser.add_argument("--refresh-seconds", type=_positive, default=1.0)
    parser.add_argument("--tick-seconds", type=_positive, default=0.1)
    parser.add_argument(
        "--engine-window-seconds",
        type=_positive,
        default=1.0,
        help="trailing window averaged by DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    )
    parser.add_argument("--driver-version", default=Options.driver_version)
    args = parser.parse_args(argv)
    host, port = args.listen
    return Options(
        kubeconfig=args.kubeconfig,
        host=host,
        port=port,
        trace=args.trace,
        profiling=args.profiling,
        refresh_s=args.refresh_seconds,
        tick_s=args.tick_seconds,
        engine_window_s=args.engine_window_seconds,
        driver_version=args.driver_version,
    )


def configure_logging() -> None:
    """JSON lines on stderr, one object per event."""
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )


async def _main(options: Options) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await serve(options, stop)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit status."""
    options = parse_args(argv)
    configure_logging()
    try:
        asyncio.run(_main(options))
    except TraceError as exc:
        structlog.get_logger("fake_dcgm").error("bad_trace", error=str(exc))
        return 1
    except (ConfigException, OSError) as exc:
        structlog.get_logger("fake_dcgm").error("cannot_start", error=str(exc))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
