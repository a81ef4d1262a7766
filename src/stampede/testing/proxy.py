"""A TCP proxy in front of a real Redis server that can lose a chosen reply.

`RedisProxy` listens on a free local port and relays every connection to its
target server. It parses both directions (commands with `hiredis.Reader`,
replies with a small RESP scanner), so it knows which reply answers which
command, and can be told to misbehave for the commands you pick:

- `drop_reply(match)`: forward the command; the server runs it; when its reply
  comes back, close the client's connection instead of relaying it (the lost
  reply that makes a client wonder whether its write was applied);
- `drop_before_forward(match)`: close the connection instead of forwarding the
  command (the server never sees it);
- `delay_reply(match, seconds)`: hold the reply for `seconds` before relaying it
  (replies after it on that connection wait behind it, as on a slow link).

`match` gets the command as a tuple of bytes (`(b"EXEC",)`, `(b"SET", b"k", b"v")`)
and returns True for the commands to act on; each rule acts `times` times (None:
always). `commands` lists every command forwarded to the server, in order.

```python
async with RedisProxy(node.address) as proxy:
    proxy.drop_reply(lambda cmd: cmd[0].upper() == b"EXEC", times=1)
    st = stampede.connect([proxy.url])
    ...
```

A connection's replies are matched to its commands in order, which holds for
everything but pub/sub, MONITOR and RESP3 push messages: do not use those
through the proxy.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Self

import hiredis

from ._lifecycle import Addressed

__all__ = ["Match", "ProxyRule", "RedisProxy"]

Match = Callable[[tuple[bytes, ...]], bool]
"""Picks commands: called with the command as a tuple of bytes."""

_CHUNK = 65536


@dataclass(slots=True)
class ProxyRule:
    """One misbehaviour of a `RedisProxy`; `hits` counts the commands it acted on."""

    action: str
    match: Match
    times: int | None
    seconds: float = 0.0
    hits: int = 0

    @property
    def spent(self) -> bool:
        return self.times is not None and self.hits >= self.times

    def take(self, command: tuple[bytes, ...]) -> bool:
        if self.spent or not self.match(command):
            return False
        self.hits += 1
        return True


class RedisProxy(Addressed):
    """A TCP proxy on `host` (a free port) relaying to the Redis server at `target`.

    `target` is `"host:port"` (or a `(host, port)` pair). Start it with
    `await proxy.start()` or `async with`; `url` and `address` are where clients
    connect. Rules apply to connections opened after and before they were added.
    """

    def __init__(self, target: str | tuple[str, int], *, host: str = "127.0.0.1") -> None:
        if isinstance(target, str):
            target_host, _, target_port = target.rpartition(":")
            self.target = (target_host.strip("[]"), int(target_port))
        else:
            self.target = (target[0], int(target[1]))
        self.host = host
        self.port = 0
        self.commands: list[tuple[bytes, ...]] = []
        """Every command forwarded to the server, oldest first."""
        self.accepted = 0
        """Client connections accepted so far."""
        self._rules: list[ProxyRule] = []
        self._server: asyncio.Server | None = None
        self._links: set[asyncio.Task[None]] = set()
        self._streams: set[asyncio.StreamWriter] = set()

    @property
    def rules(self) -> list[ProxyRule]:
        """The rules in force, oldest first (each counts its `hits`)."""
        return list(self._rules)

    def __repr__(self) -> str:
        return f"<RedisProxy {self.address} -> {self.target[0]}:{self.target[1]}>"

    # -- rules -----------------------------------------------------------------------

    def drop_reply(self, match: Match, *, times: int | None = 1) -> ProxyRule:
        """Forward a matching command, then close the client's connection in place of its reply."""
        return self._add(ProxyRule("drop_reply", match, times))

    def drop_before_forward(self, match: Match, *, times: int | None = 1) -> ProxyRule:
        """Close the client's connection in place of forwarding a matching command."""
        return self._add(ProxyRule("drop_before", match, times))

    def delay_reply(self, match: Match, seconds: float, *, times: int | None = 1) -> ProxyRule:
        """Relay the reply to a matching command only after `seconds`."""
        return self._add(ProxyRule("delay", match, times, seconds))

    def clear(self) -> None:
        """Remove every rule."""
        self._rules.clear()

    def count(self, match: Match) -> int:
        """How many forwarded commands `match` picks."""
        return sum(1 for cmd in self.commands if match(cmd))

    def _add(self, rule: ProxyRule) -> ProxyRule:
        self._rules.append(rule)
        return rule

    def _rule_for(self, command: tuple[bytes, ...]) -> ProxyRule | None:
        for rule in self._rules:
            if rule.take(command):
                return rule
        return None

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        """Listen on a free port of `host`."""
        self._server = await asyncio.start_server(self._accept, self.host, 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def aclose(self) -> None:
        """Stop listening and close every relayed connection."""
        if self._server is not None:
            self._server.close()
        for stream in list(self._streams):
            stream.transport.abort()  # each relay then ends on its own
        await asyncio.gather(*self._links, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- relaying --------------------------------------------------------------------

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.accepted += 1
        self._links.add(task)
        self._streams.add(writer)
        try:
            await self._relay(reader, writer)
        except (OSError, asyncio.IncompleteReadError, hiredis.ProtocolError):
            pass
        finally:
            self._links.discard(task)
            self._streams.discard(writer)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _relay(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection(*self.target)
        self._streams.add(server_w)
        pending: deque[ProxyRule | None] = deque()  # one entry per command in flight
        try:
            upstream = asyncio.ensure_future(self._upstream(client_r, server_w, client_w, pending))
            downstream = asyncio.ensure_future(self._downstream(server_r, client_w, pending))
            try:
                await asyncio.wait([upstream, downstream], return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in (upstream, downstream):
                    task.cancel()
                await asyncio.gather(upstream, downstream, return_exceptions=True)
        finally:
            self._streams.discard(server_w)
            server_w.close()
            with contextlib.suppress(Exception):
                await server_w.wait_closed()

    async def _upstream(
        self,
        client_r: asyncio.StreamReader,
        server_w: asyncio.StreamWriter,
        client_w: asyncio.StreamWriter,
        pending: deque[ProxyRule | None],
    ) -> None:
        parser = hiredis.Reader()
        while True:
            data = await client_r.read(_CHUNK)
            if not data:
                return
            parser.feed(data)
            out: list[bytes] = []
            while (command := parser.gets()) is not False:
                cmd = tuple(bytes(part) for part in command)
                rule = self._rule_for(cmd)
                if rule is not None and rule.action == "drop_before":
                    server_w.write(b"".join(out))
                    await server_w.drain()
                    client_w.transport.abort()
                    return
                pending.append(rule)
                self.commands.append(cmd)
                args: tuple[Any, ...] = cmd
                out.append(hiredis.pack_command(args))
            if out:
                server_w.write(b"".join(out))
                await server_w.drain()

    async def _downstream(
        self,
        server_r: asyncio.StreamReader,
        client_w: asyncio.StreamWriter,
        pending: deque[ProxyRule | None],
    ) -> None:
        buffer = b""
        while True:
            data = await server_r.read(_CHUNK)
            if not data:
                return
            buffer += data
            pos = 0
            while (end := _reply_end(buffer, pos)) is not None:
                reply = buffer[pos:end]
                pos = end
                rule = pending.popleft() if pending else None
                if rule is not None and rule.action == "drop_reply":
                    await client_w.drain()
                    client_w.transport.abort()
                    return
                if rule is not None and rule.action == "delay":
                    await client_w.drain()
                    await asyncio.sleep(rule.seconds)
                client_w.write(reply)
            buffer = buffer[pos:]
            await client_w.drain()


def _line_end(buf: bytes, pos: int) -> int | None:
    end = buf.find(b"\r\n", pos)
    return None if end < 0 else end


def _reply_end(buf: bytes, pos: int) -> int | None:
    """Where the RESP2/RESP3 value starting at `pos` ends, or None when incomplete."""
    if pos >= len(buf):
        return None
    kind = buf[pos : pos + 1]
    line = _line_end(buf, pos)
    if line is None:
        return None
    after = line + 2
    if kind in (b"+", b"-", b":", b"_", b",", b"#", b"("):
        return after
    if kind in (b"$", b"!", b"="):
        size = int(buf[pos + 1 : line])
        if size < 0:
            return after
        end = after + size + 2
        return end if end <= len(buf) else None
    if kind in (b"*", b"~", b">", b"%", b"|"):
        count = int(buf[pos + 1 : line])
        if kind in (b"%", b"|"):
            count *= 2
        at = after
        for _ in range(max(count, 0)):
            found = _reply_end(buf, at)
            if found is None:
                return None
            at = found
        if kind == b"|":  # attributes precede the value they describe
            return _reply_end(buf, at)
        return at
    raise hiredis.ProtocolError(f"unknown RESP type byte {kind!r}")
