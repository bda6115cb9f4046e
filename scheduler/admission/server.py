"""kopf's admission webhooks inside the daemon's event loop.

`AdmissionWebhooks.run()` is one of the daemon's tasks (every replica runs it, leader or not):

    certificate   webhooks.certDir (a mounted kubernetes.io/tls Secret, re-read on change by kopf)
                  or a self-signed one made at start (`scheduler.admission.certs`)
    kopf          `kopf.spawn_tasks` with a registry of its own holding only: a login handler (the
                  daemon's own API credentials), `validate-priorityclass-reclaim` and
                  `mutate-gpu-pod-scheduler-name`; settings: standalone (no peering), no
                  scanning of CRDs or namespaces, no Kubernetes events, no webhook configuration
                  management (manifests ship those), no SIGKILL timer on exit
    HTTPS paths   /validate-priorityclass-reclaim   /mutate-gpu-pod-scheduler-name

kopf installs SIGINT/SIGTERM handlers of its own when started in the main thread; they are put
back as they were at once, so the daemon keeps its graceful stop. kopf configures no logging when
started this way; its own records of WARNING and above become `kopf_log` structlog lines (no
tracebacks). Cancelling `run()` stops kopf's tasks (and the HTTPS server) and waits for them;
only the tasks kopf started are touched. A failure is logged and retried with backoff: the
webhooks fail open, so the scheduler keeps running without them.

The decisions themselves are `scheduler.admission.rules`; a refusal is logged and answered with
the rule's message (HTTP 422 in the AdmissionReview status); a pod given our schedulerName is
logged.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import signal
import socket
from collections.abc import AsyncIterator, Mapping
from contextlib import suppress
from pathlib import Path
from typing import Any

import kopf
import structlog
from kubernetes_asyncio import client

from scheduler.admission import certs
from scheduler.admission.rules import priority_class_denial, scheduler_name_to_set
from scheduler.config import SchedulerConfig, WebhooksConfig
from topology.text import clip

log = structlog.get_logger("gpu-scheduler.admission")

VALIDATE_PRIORITY_CLASS = "validate-priorityclass-reclaim"
"""kopf handler id and URL path of the validating webhook."""
MUTATE_POD = "mutate-gpu-pod-scheduler-name"
"""kopf handler id and URL path of the mutating webhook."""
REFUSED_CODE = 422
"""HTTP code in the AdmissionReview status of a refused PriorityClass (Unprocessable Entity)."""
MAX_LOGGED_CHARS = 512
"""Refusal messages are cut to this in log lines (they are bounded already; belt and braces)."""

RETRY_INITIAL_S = 1.0
RETRY_MAX_S = 60.0
"""Backoff between attempts to (re)start the webhook server after a failure."""

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class KopfLogBridge(logging.Handler):
    """Forwards kopf's own log records (stdlib `logging`, logger `kopf`) of `KOPF_LOG_LEVEL` and
    above to structlog as one `kopf_log` line each: the message cut to `MAX_LOGGED_CHARS`, the
    exception as its type and text, never a traceback."""

    def emit(self, record: logging.LogRecord) -> None:
        error = ""
        if record.exc_info and record.exc_info[1] is not None:
            exception = record.exc_info[1]
            error = clip(f"{type(exception).__name__}: {exception}", MAX_LOGGED_CHARS)
        message = clip(record.getMessage(), MAX_LOGGED_CHARS)
        level = record.levelname.lower()
        bound = log.bind(logger=record.name, **({"error": error} if error else {}))
        if record.levelno >= logging.ERROR:
            bound.error("kopf_log", message=message, level_name=level)
        else:
            bound.warning("kopf_log", message=message, level_name=level)


KOPF_LOG_LEVEL = logging.WARNING
"""kopf's records below this are dropped (it logs every handler call at INFO)."""


def bridge_kopf_logging() -> None:
    """Route the `kopf` logger to `KopfLogBridge` only (no propagation to the root logger, so
    no stdlib traceback on stderr). Idempotent; leaves every other logger alone."""
    logger = logging.getLogger("kopf")
    if not any(isinstance(handler, KopfLogBridge) for handler in logger.handlers):
        logger.addHandler(KopfLogBridge())
    logger.setLevel(KOPF_LOG_LEVEL)
    logger.propagate = False


async def connection_info(configuration: client.Configuration) -> kopf.ConnectionInfo:
    """kopf's credentials from the daemon's kubernetes_asyncio configuration (kubeconfig or
    in-cluster service account; read again on each call, so a rotated token is picked up)."""
    header: Any = configuration.get_api_key_with_prefix("BearerToken")
    if inspect.isawaitable(header):
        header = await header
    parts = str(header).split(" ", 1) if header else []
    scheme, token = (None, None) if not parts else (None, parts[0]) if len(parts) == 1 else parts
    return kopf.ConnectionInfo(
        server=str(configuration.host),
        ca_path=configuration.ssl_ca_cert or None,
        insecure=not configuration.verify_ssl,
        scheme=scheme,
        token=token,
        certificate_path=configuration.cert_file or None,
        private_key_path=configuration.key_file or None,
    )


def _pod_ref(body: Mapping[str, Any]) -> str:
    metadata = body.get("metadata") or {}
    name = metadata.get("name") or f"{metadata.get('generateName') or ''}<generated>"
    return f"{metadata.get('namespace') or ''}/{name}"[:253]


def build_registry(
    scheduler_name: str, configuration: client.Configuration
) -> kopf.OperatorRegistry:
    """A kopf registry with only this scheduler's admission handlers and its login handler."""
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    async def login(**_: Any) -> kopf.ConnectionInfo:
        return await connection_info(configuration)

    @kopf.on.validate(
        "scheduling.k8s.io",
        "v1",
        "priorityclasses",
        id=VALIDATE_PRIORITY_CLASS,
        operations=["CREATE", "UPDATE"],
        ignore_failures=True,
        registry=registry,
    )
    def validate_priority_class(body: Mapping[str, Any], **_: Any) -> None:
        reason = priority_class_denial(body)
        if reason is not None:
            name = str((body.get("metadata") or {}).get("name") or "")[:253]
            log.info("admission_refused", priority_class=name, reason=reason[:MAX_LOGGED_CHARS])
            raise kopf.AdmissionError(reason, code=REFUSED_CODE)

    @kopf.on.mutate(
        "v1",
        "pods",
        id=MUTATE_POD,
        operations=["CREATE"],
        ignore_failures=True,
        registry=registry,
    )
    def mutate_pod(body: Mapping[str, Any], patch: kopf.Patch, **_: Any) -> None:
        name = scheduler_name_to_set(body, scheduler_name)
        if name is not None:
            patch.spec["schedulerName"] = name
            log.info("admission_scheduler_name_set", pod=_pod_ref(body), scheduler_name=name)

    return registry


class _RecordingServer(kopf.WebhookServer):
    """kopf's HTTPS webhook server that also hands each client config it yields (URL and CA
    bundle) to `on_config`."""

    def __init__(self, on_config: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._on_config = on_config

    async def __call__(self, fn: kopf.WebhookFn) -> AsyncIterator[kopf.WebhookClientConfig]:
        async for config in super().__call__(fn):
            self._on_config(dict(config))
            yield config


def operator_settings(server: kopf.WebhookServer) -> kopf.OperatorSettings:
    """kopf settings for admission only, inside a process kopf does not own."""
    settings = kopf.OperatorSettings()
    settings.peering.standalone = True
    settings.peering.mandatory = False
    settings.scanning.disabled = True
    settings.posting.enabled = False
    settings.process.ultimate_exiting_timeout = None
    settings.admission.server = server
    settings.admission.managed = None
    return settings


def loop_signal_handlers(loop: asyncio.AbstractEventLoop) -> dict[int, object]:
    """The loop's SIGINT/SIGTERM handlers (asyncio keeps them in `_signal_handlers`; no public
    reader exists)."""
    handlers = getattr(loop, "_signal_handlers", None)
    if not isinstance(handlers, dict):
        return {}
    return {sig: handlers[sig] for sig in _SIGNALS if sig in handlers}


def restore_signal_handlers(loop: asyncio.AbstractEventLoop, saved: dict[int, object]) -> None:
    """Put back the SIGINT/SIGTERM handlers kopf replaced; remove those it added."""
    handlers = getattr(loop, "_signal_handlers", None)
    for sig in _SIGNALS:
        if sig in saved and isinstance(handlers, dict):
            handlers[sig] = saved[sig]
        else:
            with suppress(NotImplementedError, RuntimeError, ValueError):
                loop.remove_signal_handler(sig)


class AdmissionWebhooks:
    """The webhook server of one daemon; `run()` serves until cancelled (see the module
    docstring). `client_config` (url, caBundle) is set, and `serving` is set, once the HTTPS
    server listens."""

    def __init__(self, settings: SchedulerConfig, api_client: client.ApiClient) -> None:
        self.webhooks: WebhooksConfig = settings.webhooks
        self.scheduler_name = settings.scheduler_name
        self.configuration: client.Configuration = api_client.configuration
        self.client_config: dict[str, Any] | None = None
        self.serving = asyncio.Event()
        self.served = False
        """The current attempt has listened (resets the retry backoff when it fails later)."""

    def _record(self, config: dict[str, Any]) -> None:
        self.client_config = config
        self.served = True
        self.serving.set()
        log.info("admission_webhooks_serving", url=config.get("url"))

    def _names(self) -> list[str]:
        address = self.webhooks.address
        return [address, "localhost", "127.0.0.1", socket.gethostname()]

    async def run(self) -> None:
        """Serve until cancelled. A failure (a missing certificate file, kopf stopping) is logged
        as `admission_webhooks_failed` and retried with backoff (`RETRY_INITIAL_S` doubling to
        `RETRY_MAX_S`, back to the start after a success): the webhooks fail open, and the
        scheduler is never stopped for them."""
        bridge_kopf_logging()
        delay = RETRY_INITIAL_S
        while True:
            try:
                await self._run_once()
            except asyncio.CancelledError:
                raise
            except Exception as error:
                if self.served:
                    delay = RETRY_INITIAL_S
                self.served = False
                log.error(
                    "admission_webhooks_failed",
                    error=clip(f"{type(error).__name__}: {error}", MAX_LOGGED_CHARS),
                    retry_in_s=delay,
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_MAX_S)

    async def _run_once(self) -> None:
        with certs.temporary_folder() as folder:
            if self.webhooks.cert_dir is not None:
                files = certs.mounted(self.webhooks.cert_dir)
            else:
                files = certs.self_signed(self._names(), Path(folder))
            server = _RecordingServer(
                self._record,
                addr=self.webhooks.address or None,
                port=self.webhooks.port or None,
                certfile=str(files.cert),
                pkeyfile=str(files.key),
                cafile=str(files.ca) if files.ca is not None else None,
            )
            await self._serve(server)

    async def _serve(self, server: kopf.WebhookServer) -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        saved = loop_signal_handlers(loop)
        try:
            tasks = await kopf.spawn_tasks(
                registry=build_registry(self.scheduler_name, self.configuration),
                settings=operator_settings(server),
                clusterwide=True,
                standalone=True,
                stop_flag=stop,
            )
        finally:
            restore_signal_handlers(loop, saved)
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            ended = sorted(
                f"{task.get_name()} ({task.exception()!r})"
                if not task.cancelled() and task.exception() is not None
                else task.get_name()
                for task in done
            )
            raise RuntimeError(f"kopf's task(s) ended: {'; '.join(ended)}")
        finally:
            self.serving.clear()
            stop.set()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
