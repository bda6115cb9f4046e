"""List+watch of one resource kind into a local store of plain JSON dicts.

One `Informer` keeps a cache of one kind (Nodes, Pods of all namespaces, PriorityClasses,
PodDisruptionBudgets) and tells a handler about every change, like client-go's reflector and
informer together:

```
         LIST (paged)                 WATCH from resourceVersion
  start ───────────────► synced ────────────────────────────────► event ─► store, handler
              ▲                 ▲  watch ended (timeout, EOF):         │
              │                 └──── resume from the last version ◄───┘
              │ 410 Gone / Expired
              └──── RELIST: diff against the store (add, update, delete)

  any other error (refused, 5xx, timeouts, bad JSON): log, sleep with exponential backoff,
  retry the step that failed; run() only ends when cancelled.
```

Objects stay the API's JSON (`dict`s), never the generated model classes: deserializing thousands
of pods into models costs far more than the scheduling itself. The list function is one of the
generated client's list calls (e.g. `CoreV1Api(api).list_pod_for_all_namespaces`, or a
`functools.partial` of a namespaced one); it is called with `_preload_content=False` and the body
is parsed here. A watch is the same call with `watch=True`; its body is one JSON event per line.

Every event advances `resource_version` (bookmarks do nothing else), so a watch that ends resumes
where it stopped without a relist. The API server answers 410 when that version is older than the
history it keeps; only then does the informer list again, and the diff against the store delivers
the changes made in the gap, including deletions that no watch event reported.

The store keeps each object as `InformerOptions.trim` leaves it (by default without
metadata.managedFields, which no handler reads and which is often the bulk of an object), and
handlers see that same trimmed object: a store of thousands of nodes or pods holds what the
scheduler reads, not the whole API object.

Handlers are plain synchronous callables that must not block: they run inside the informer's
task, in the order of events. An exception in a handler is logged and does not stop the informer.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import orjson
import structlog
from kubernetes_asyncio.client import ApiException

KubeObject = dict[str, Any]
"""An API object as the API server serializes it."""

PAGE_SIZE = 500
GONE = 410
_SHORT_WATCH_SECONDS = 1.0
"""A watch that ends without a single event sooner than this counts as a failure (backoff)."""

log = structlog.get_logger("scheduler.informer")


def decode_json(data: bytes | str) -> Any:
    """One JSON document (a list page or a watch line), decoded by orjson (several times faster
    than `json.loads` on API objects); what orjson refuses but the standard library reads (NaN,
    Infinity) is read by `json.loads`, so such an object is applied rather than stalling the
    watch. Integers up to 64 bits are exact; orjson reads larger ones (never in an API object)
    as floats. Raises `ValueError` on text that is not JSON."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


class InformerHandler(Protocol):
    """Receives the changes of one kind. Each method is called from the informer's task and must
    return quickly without blocking."""

    def on_add(self, obj: KubeObject) -> None: ...

    def on_update(self, old: KubeObject, new: KubeObject) -> None: ...

    def on_delete(self, obj: KubeObject) -> None:
        """`obj` is the object's last state: the deletion event's, or the store's after a relist
        found it gone."""


class WatchExpired(Exception):
    """The resourceVersion to watch from is no longer available (410 Gone / Expired)."""


class WatchError(Exception):
    """The watch stream carried an error or something that is not a watch event."""


def without_managed_fields(obj: KubeObject) -> KubeObject:
    """The default `trim`: drops metadata.managedFields (in place) and returns `obj`."""
    metadata = obj.get("metadata")
    if isinstance(metadata, dict):
        metadata.pop("managedFields", None)
    return obj


def object_key(obj: KubeObject) -> str:
    """ "namespace/name", or "name" for cluster-scoped objects."""
    metadata = obj.get("metadata") or {}
    name = metadata.get("name", "")
    namespace = metadata.get("namespace")
    return f"{namespace}/{name}" if namespace else str(name)


def resource_version(obj: KubeObject) -> str:
    """The object's metadata.resourceVersion ("" if absent)."""
    return str((obj.get("metadata") or {}).get("resourceVersion", ""))


@dataclass(frozen=True)
class InformerOptions:
    """What an `Informer` lists and how: selectors, paging, timeouts, backoff and trimming. The
    defaults are the daemon's. `ValueError` on a non-positive page size or watch timeout, or
    unless 0 < backoff_initial <= backoff_max."""

    field_selector: str | None = None
    """Lists and watches only the objects it selects (None: all)."""
    label_selector: str | None = None
    """Likewise, by label (None: all)."""
    page_size: int = PAGE_SIZE
    """Objects per list page (limit/continue)."""
    watch_timeout_seconds: int = 300
    """How long the API server keeps one watch open before ending it (it is then resumed)."""
    backoff_initial: float = 0.5
    """Seconds slept after the first failure in a row; doubled per failure."""
    backoff_max: float = 30.0
    """The longest sleep between failures."""
    connect_timeout: float = 10.0
    """Seconds allowed for connecting, for a list and for a watch."""
    read_timeout: float = 60.0
    """Bounds the wait for list data; a watch may stay silent for its whole
    `watch_timeout_seconds` (plus `read_timeout`) before the connection counts as dead."""
    optional: bool = False
    """The API server may not serve the kind (resource.k8s.io/v1 before Kubernetes 1.34,
    DeviceTaintRules before 1.37): a 404 then counts as synced with nothing in the store, and the
    informer keeps trying quietly, filling the store once the kind is served."""
    trim: Callable[[KubeObject], KubeObject] = without_managed_fields
    """Applied to every listed or watched object before it is stored and handed to the handler
    (it may modify the object in place); it must keep metadata.name, namespace and
    resourceVersion."""

    def __post_init__(self) -> None:
        if self.page_size <= 0 or self.watch_timeout_seconds <= 0:
            raise ValueError("page_size and watch_timeout_seconds must be positive")
        if self.backoff_initial <= 0 or self.backoff_max < self.backoff_initial:
            raise ValueError("need 0 < backoff_initial <= backoff_max")


class Informer:
    """A list+watch loop over one kind, with a store of the objects it has seen.

    Read access: `get(key)`, `list()`, `len(informer)`; `resource_version` is the version the
    next watch starts from. `synced` is set after the first successful list and stays set.
    `relists` counts lists after that first one (each caused by a 410), `reconnects` counts
    failures followed by a backoff sleep.
    """

    def __init__(
        self,
        name: str,
        list_fn: Callable[..., Awaitable[Any]],
        handler: InformerHandler,
        options: InformerOptions = InformerOptions(),
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        """The informer `name` (in its log lines) lists and watches with `list_fn` (see the
        module docstring) and tells `handler` of every change, as `options` say; `clock`
        (monotonic seconds) times watches, `sleep` waits out the backoff."""
        self.name = name
        self._list_fn = list_fn
        self._handler = handler
        self._selectors: dict[str, str] = {}
        if options.field_selector:
            self._selectors["field_selector"] = options.field_selector
        if options.label_selector:
            self._selectors["label_selector"] = options.label_selector
        self._page_size = options.page_size
        self._watch_timeout = options.watch_timeout_seconds
        self._backoff_initial = options.backoff_initial
        self._backoff_max = options.backoff_max
        self._optional = options.optional
        self._list_timeout = (options.connect_timeout, options.read_timeout)
        self._watch_request_timeout = (
            options.connect_timeout,
            options.watch_timeout_seconds + options.read_timeout,
        )
        self._clock = clock
        self._sleep = sleep
        self._trim = options.trim
        self._store: dict[str, KubeObject] = {}
        self._needs_list = True
        self._delay = options.backoff_initial
        self._log = log.bind(informer=name)
        self.resource_version: str | None = None
        self.synced = asyncio.Event()
        self.relists = 0
        self.reconnects = 0
        self.absent = False
        """True while the API server answers 404 for the resource (not served)."""

    # ----------------------------------------------------------------------------------------
    # Store access.

    def get(self, key: str) -> KubeObject | None:
        """The stored object for "namespace/name" (or "name"), None if unknown."""
        return self._store.get(key)

    def list(self) -> list[KubeObject]:
        """Every stored object (a new list; the objects themselves are shared, do not mutate)."""
        return list(self._store.values())

    def __len__(self) -> int:
        return len(self._store)

    # ----------------------------------------------------------------------------------------
    # The loop.

    async def run(self) -> None:
        """List, then watch, forever; returns only by cancellation.

        May be called again after a cancelled run: it resumes watching from `resource_version`
        (relisting if that is gone) instead of starting over.
        """
        while True:
            try:
                if self._needs_list:
                    await self._list_and_replace()
                await self._watch()
            except WatchExpired as expired:
                self._needs_list = True
                self._log.warning("informer_relist", reason=str(expired) or "410 Gone")
            except Exception as error:
                self.reconnects += 1
                delay = self._delay
                self._delay = min(self._delay * 2, self._backoff_max)
                if isinstance(error, ApiException) and error.status == 404:
                    # The API server does not serve the resource (an optional CRD that is not
                    # installed, an API version that is off): said once, then retried quietly.
                    if not self.absent:
                        self._log.info("informer_resource_not_served", retry_max=self._backoff_max)
                    self.absent = True
                    if self._optional:
                        self.synced.set()
                else:
                    self._log.warning(
                        "informer_reconnect", error=f"{type(error).__name__}: {error}", delay=delay
                    )
                await self._sleep(delay)

    async def _list_and_replace(self) -> None:
        items, version = await self._list()
        relist = self.synced.is_set()
        self._replace(items, version)
        self._needs_list = False
        self._delay = self._backoff_initial
        self.absent = False
        if relist:
            self.relists += 1
        else:
            self.synced.set()
            self._log.info("informer_synced", objects=len(items), resource_version=version)

    async def _list(self) -> tuple[dict[str, KubeObject], str]:
        """All objects (paged with limit/continue) and the list's resourceVersion."""
        items: dict[str, KubeObject] = {}
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {
                "limit": self._page_size,
                "_preload_content": False,
                "_request_timeout": self._list_timeout,
                **self._selectors,
            }
            if token:
                kwargs["_continue"] = token
            response = await self._list_fn(**kwargs)
            try:
                await _raise_for_status(response)
                body = decode_json(await response.read())
            finally:
                response.release()
            kind = str(body.get("kind", "")).removesuffix("List")
            api_version = body.get("apiVersion")
            for obj in body.get("items") or ():
                # List items omit kind/apiVersion; watch events carry them. Make both alike.
                obj.setdefault("kind", kind)
                obj.setdefault("apiVersion", api_version)
                items[object_key(obj)] = self._trim(obj)
            metadata = body.get("metadata") or {}
            token = metadata.get("continue")
            if not token:
                return items, str(metadata.get("resourceVersion", ""))

    def _replace(self, items: dict[str, KubeObject], version: str) -> None:
        """Make `items` the store and tell the handler how it differs from the old one."""
        old_store, self._store = self._store, items
        self.resource_version = version
        for key, gone in old_store.items():
            if key not in items:
                self._notify(self._handler.on_delete, gone)
        for key, obj in items.items():
            old = old_store.get(key)
            if old is None:
                self._notify(self._handler.on_add, obj)
            elif resource_version(old) != resource_version(obj):
                self._notify(self._handler.on_update, old, obj)

    async def _watch(self) -> None:
        """One watch request from `resource_version`, applied event by event until it ends."""
        started = self._clock()
        events = 0
        response = await self._list_fn(
            watch=True,
            allow_watch_bookmarks=True,
            resource_version=self.resource_version,
            timeout_seconds=self._watch_timeout,
            _preload_content=False,
            _request_timeout=self._watch_request_timeout,
            **self._selectors,
        )
        try:
            if response.status == GONE:
                raise WatchExpired(f"watch answered HTTP {GONE}")
            await _raise_for_status(response)
            async for line in _lines(response.content):
                if line.strip():
                    self._apply(decode_json(line))
                    events += 1
                    self._delay = self._backoff_initial
        finally:
            response.release()
        elapsed = self._clock() - started
        if events == 0 and elapsed < min(_SHORT_WATCH_SECONDS, self._watch_timeout / 2):
            raise WatchError(f"watch ended after {elapsed:.3f} s without an event")

    def _apply(self, event: Any) -> None:
        """Apply one watch event to the store and the handler; raises on ERROR events."""
        if not isinstance(event, dict) or not isinstance(event.get("object"), dict):
            raise WatchError(f"not a watch event: {str(event)[:200]}")
        kind, obj = event.get("type"), event["object"]
        if kind == "ERROR":
            message = f"{obj.get('code')} {obj.get('reason')}: {obj.get('message')}"
            if obj.get("code") == GONE:
                raise WatchExpired(message)
            raise WatchError(message)
        if kind not in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK"):
            raise WatchError(f"unknown watch event type {kind!r}")
        version = resource_version(obj)
        if version:
            self.resource_version = version
        if kind == "BOOKMARK":
            return
        obj = self._trim(obj)
        key = object_key(obj)
        if kind == "DELETED":
            if self._store.pop(key, None) is not None:
                self._notify(self._handler.on_delete, obj)
            return
        old = self._store.get(key)
        self._store[key] = obj
        if old is None:
            self._notify(self._handler.on_add, obj)
        else:
            self._notify(self._handler.on_update, old, obj)

    def _notify(self, callback: Callable[..., None], *objs: KubeObject) -> None:
        try:
            callback(*objs)
        except Exception:
            self._log.exception(
                "informer_handler_error", callback=callback.__name__, key=object_key(objs[-1])
            )


async def _raise_for_status(response: Any) -> None:
    """Raise ApiException (with the body, as the generated client would) for a non-2xx answer."""
    if not 200 <= response.status <= 299:
        error = ApiException(status=response.status, reason=response.reason)
        error.body = await response.read()
        raise error


async def _lines(content: Any) -> AsyncIterator[bytes]:
    """The lines of a streamed body. Unlike StreamReader.readline this has no line-length limit
    (an event line is a whole object, which can exceed aiohttp's 128 KiB line limit)."""
    buffer = bytearray()
    searched = 0
    while True:
        chunk: bytes = await content.readany()
        if not chunk:
            if buffer:
                yield bytes(buffer)
            return
        buffer += chunk
        while (end := buffer.find(b"\n", searched)) >= 0:
            yield bytes(buffer[:end])
            del buffer[: end + 1]
            searched = 0
        searched = len(buffer)
