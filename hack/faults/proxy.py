"""A TCP proxy on loopback that forwards bytes blindly (TLS included) and resets connections at
random: the flaky network between the scheduler and the API server.

    async with ResetProxy(("127.0.0.1", apiserver_port), seed=1) as proxy:
        kubeconfig = proxied_kubeconfig(admin_kubeconfig, proxy.url, folder)
        proxy.resets_enabled = True     # from now on, connections are reset at random
        ...
        proxy.resets                    # how many were reset

The API server's serving certificate names 127.0.0.1 (hack/localcluster/pki.py), so a client
verifying TLS against the cluster CA accepts the proxy's address unchanged.

Resets are seeded and bounded: while enabled, each forwarded chunk resets its connection with
probability `chunk_reset_probability`, and every `sweep_interval_s` one live connection (chosen
by the seeded RNG) is reset too, which reaches idle watches; never more than `max_resets` in all.
A reset is a TCP RST (SO_LINGER 0), not a clean close.

`hold()` stops forwarding the client's bytes to the API server (requests wait in the proxy,
answers and watch events still flow back) until `release()`: a write in flight, stalled.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct
from pathlib import Path
from types import TracebackType

import yaml

CHUNK = 65536


def _rst(writer: asyncio.StreamWriter) -> None:
    """Close with a TCP RST rather than a FIN."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class _Link:
    """One proxied connection: both ends' writers."""

    def __init__(self, client: asyncio.StreamWriter, upstream: asyncio.StreamWriter) -> None:
        self.client = client
        self.upstream = upstream

    def reset(self) -> None:
        _rst(self.client)
        _rst(self.upstream)


class ResetProxy:
    """See the module docstring. Runs in the caller's event loop."""

    def __init__(
        self,
        target: tuple[str, int],
        seed: int,
        chunk_reset_probability: float = 0.02,
        sweep_interval_s: float = 1.5,
        max_resets: int = 200,
    ) -> None:
        self.target = target
        self.rng = random.Random(seed)
        self.chunk_reset_probability = chunk_reset_probability
        self.sweep_interval_s = sweep_interval_s
        self.max_resets = max_resets
        self.resets_enabled = False
        self.resets = 0
        self.connections = 0
        self._links: set[_Link] = set()
        self._server: asyncio.Server | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._flowing = asyncio.Event()
        self._flowing.set()
        self.port = 0

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    async def __aenter__(self) -> ResetProxy:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def start(self, port: int = 0) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", port)
        self.port = int(self._server.sockets[0].getsockname()[1])
        self._sweeper = asyncio.create_task(self._sweep())

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        if self._server is not None:
            self._server.close()
            self._flowing.set()
            for link in list(self._links):
                link.reset()
            await self._server.wait_closed()

    def hold(self) -> None:
        """Stop forwarding requests upstream until `release()`."""
        self._flowing.clear()

    def release(self) -> None:
        self._flowing.set()

    def _may_reset(self) -> bool:
        return self.resets_enabled and self.resets < self.max_resets

    def reset_all(self) -> int:
        """Reset every live connection now (counted, and bounded like the random ones)."""
        count = 0
        for link in list(self._links):
            if self.resets >= self.max_resets:
                break
            self._reset(link)
            count += 1
        return count

    def _reset(self, link: _Link) -> None:
        if link in self._links:
            self._links.discard(link)
            self.resets += 1
            link.reset()

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(self.sweep_interval_s)
            if self._may_reset() and self._links:
                links = sorted(self._links, key=id)
                self._reset(links[self.rng.randrange(len(links))])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            _rst(writer)
            return
        self.connections += 1
        link = _Link(writer, up_writer)
        self._links.add(link)
        try:
            await asyncio.gather(
                self._pipe(reader, up_writer, link, upstream=True),
                self._pipe(up_reader, writer, link, upstream=False),
            )
        finally:
            self._links.discard(link)
            for end in (writer, up_writer):
                end.transport.abort()

    async def _pipe(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        link: _Link,
        upstream: bool,
    ) -> None:
        try:
            while True:
                data = await reader.read(CHUNK)
                if not data:
                    if writer.can_write_eof():
                        writer.write_eof()
                    return
                if self._may_reset() and self.rng.random() < self.chunk_reset_probability:
                    self._reset(link)
                    return
                if upstream:
                    await self._flowing.wait()
                writer.write(data)
                await writer.drain()
        except (OSError, RuntimeError):  # the other direction reset or closed the link
            link.reset()


def proxied_kubeconfig(kubeconfig: Path, server: str, folder: Path, name: str = "proxied") -> Path:
    """A copy of `kubeconfig` whose every cluster's server is `server`."""
    data = yaml.safe_load(kubeconfig.read_text())
    for cluster in data.get("clusters") or []:
        cluster["cluster"]["server"] = server
    path = folder / f"{name}.kubeconfig"
    path.write_text(yaml.safe_dump(data))
    path.chmod(0o600)
    return path
