"""What `open()` checks before anything is written, and the shard identity record.

Every server is asked `PING`-like questions (`INFO server`, `INFO cluster`) on
its lane; what goes wrong becomes a `SetupError` that names the URL (password
hidden) and the fix: unreachable, paused, refused credentials, missing ACL
permissions, TLS against a plain port, a cluster node listed as a primary (or
the reverse), two URLs that reach one server (same `run_id`).

Over independent primaries each server also carries a small identity record,
`stampede:shard` (see docs/wire-formats.md): which shard of how many it is, the
deployment's id and a digest of the slot layout. It is written once (`SET NX`)
by the first `open()`; a later `open()` whose URLs list the servers in another
order, or another number of them, or another slot map, is refused.
"""

from __future__ import annotations

import hashlib
import json
import re
import ssl
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple
from urllib.parse import urlsplit, urlunsplit

from ..errors import SetupError
from ..options import ConnectOptions
from ._endpoint import parse_url
from ._lane import Lane
from ._resp import (
    AuthError,
    ConnectionLost,
    ConnectTimeout,
    NoPermissionError,
    RedisError,
    ReplyError,
    ReplyTimeout,
)

__all__ = [
    "IDENTITY_KEY",
    "Identity",
    "ServerInfo",
    "cluster_mode",
    "fields",
    "probe",
    "redact",
]

IDENTITY_KEY = b"stampede:shard"
"""The key of the shard identity record on each independent primary."""
IDENTITY_FORMAT = 1


def redact(url: str) -> str:
    """`url` with its password (if any) replaced by `***`, fit for a message or a log."""
    try:
        parts = urlsplit(url)
        port = parts.port  # (a port out of range is a ValueError too)
    except ValueError:  # it does not parse: mask whatever stands for a password
        return re.sub(r"(://[^@/]*?:)[^@/]*@", r"\1***@", url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    netloc = f"{parts.username or ''}:***@{host}" + (f":{port}" if port is not None else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """What `probe` learnt of one server."""

    url: str
    run_id: str | None
    cluster_enabled: bool | None
    role: str | None = None
    """`master` or `slave` (INFO replication), None when the server did not say."""
    primary: str | None = None
    """For a replica: the `host:port` of the primary it follows."""

    def refuse_replica(self) -> None:
        """`SetupError` when this server is a replica: a write would fail READONLY after
        other shards took their part of it."""
        if self.role == "slave":
            follows = f" of {self.primary}" if self.primary else ""
            raise SetupError(
                f"is a replica{follows}, and stampede writes only to primaries: list the "
                f"primary's URL instead (redis://{self.primary or '<primary>'}), or use "
                "Sentinel (sentinels=..., services=...) to follow failovers",
                url=redact(self.url),
                problem="replica",
            )


def fields(raw: Any) -> dict[str, str]:
    """The `name: value` lines of an `INFO` reply."""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    out: dict[str, str] = {}
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if sep and not name.startswith("#"):
            out[name.strip()] = value.strip()
    return out


def _is_tls_failure(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return False
        if isinstance(seen, ssl.SSLError) or "SSL" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def refusal(exc: BaseException, url: str, *, waited: float | None = None) -> SetupError:
    """The `SetupError` for a failure to reach or use the server at `url`."""
    shown = redact(url)
    if isinstance(exc, SetupError):
        return exc
    if isinstance(exc, AuthError):
        text = str(exc)
        fix = (
            "put user:password in the URL (redis://user:password@host:port, or "
            "redis://:password@host:port for the default user)"
        )
        if "without any password configured" in text:
            why = "the URL gives a password, but the server has none"
            fix = "drop it (redis://host:port), or set the server's requirepass"
        elif "WRONGPASS" in text or "invalid" in text.lower():
            why = "the user or password in the URL was refused"
        else:
            why = "authentication required"
        return SetupError(f"{why} ({text}); {fix}", url=shown, problem="auth")
    if isinstance(exc, NoPermissionError):
        return SetupError(
            f"the ACL user may not run what stampede needs ({exc}); grant it, e.g. "
            "ACL SETUSER <user> on >password ~* +@read +@write +@scripting "
            "+@transaction +@connection +info, or put another user in the URL",
            url=shown,
            problem="permission",
        )
    scheme = url.split("://", 1)[0].lower()
    if scheme == "rediss" and (
        _is_tls_failure(exc) or isinstance(exc, ReplyTimeout | ConnectTimeout)
    ):
        # A plain port never answers a TLS hello: the handshake fails or times out.
        return SetupError(
            f"the TLS handshake did not complete ({type(exc).__name__}: {exc}); this port "
            "does not seem to speak TLS: use redis:// for a plain port, or point rediss:// "
            "at the server's tls-port (or, if it does speak TLS, is the server paused?)",
            url=shown,
            problem="tls",
        )
    if isinstance(exc, ReplyTimeout | ConnectTimeout | TimeoutError):
        within = f" within {waited:g} s" if waited is not None else ""
        return SetupError(
            f"the server did not answer{within}; is it paused or overloaded? (raise "
            "ConnectOptions.socket_timeout or connect_timeout if it is just slow)",
            url=shown,
            problem="timeout",
        )
    if isinstance(exc, ConnectionLost | ConnectionError | OSError):
        return SetupError(
            f"could not connect ({type(exc).__name__}: {exc}); is the server up, and are "
            "the host and port right?",
            url=shown,
            problem="unreachable",
        )
    if isinstance(exc, ReplyError) and "DB index is out of range" in str(exc):
        database = urlsplit(url).path.strip("/")
        return SetupError(
            f"the server has no database {database} ({exc}); give a number below its "
            "`databases` setting (16 by default: /0 to /15) at the end of the URL",
            url=shown,
            problem="database",
        )
    return SetupError(
        f"the server refused stampede's checks ({type(exc).__name__}: {exc})",
        url=shown,
        problem="unreachable",
    )


async def probe(lane: Lane, url: str, *, waited: float | None = None) -> ServerInfo:
    """Ask the server at `url` who it is; `SetupError` when it cannot be used."""
    try:
        server, cluster, replication = await lane.pipeline(
            [("INFO", "server"), ("INFO", "cluster"), ("INFO", "replication")]
        )
    except (RedisError, OSError, TimeoutError) as exc:
        raise refusal(exc, url, waited=waited) from exc
    for reply in (server, cluster, replication):
        if isinstance(reply, NoPermissionError):
            raise refusal(reply, url) from reply
    run_id = None if isinstance(server, BaseException) else fields(server).get("run_id")
    enabled = None if isinstance(cluster, BaseException) else fields(cluster).get("cluster_enabled")
    repl = {} if isinstance(replication, BaseException) else fields(replication)
    primary = None
    if repl.get("master_host"):
        primary = f"{repl['master_host']}:{repl.get('master_port', '6379')}"
    return ServerInfo(
        url,
        run_id or None,
        None if enabled is None else enabled == "1",
        role=repl.get("role"),
        primary=primary,
    )


def same_servers(infos: Sequence[ServerInfo]) -> None:
    """`SetupError` when two URLs reach one server (the same `run_id`)."""
    seen: dict[str, str] = {}
    for info in infos:
        if info.run_id is None:
            continue
        other = seen.get(info.run_id)
        if other is not None:
            raise SetupError(
                f"reaches the same server as {redact(other)} (run_id {info.run_id[:12]}...); "
                "each shard needs its own server: list each primary once",
                url=redact(info.url),
                problem="same-server",
            )
        seen[info.run_id] = info.url


@dataclass(frozen=True, slots=True)
class Identity:
    """One primary's identity record: shard `shard` of `shards` of deployment `topology`."""

    shard: int
    shards: int
    topology: str
    layout: str
    written_at: int

    def encode(self) -> bytes:
        return json.dumps(
            {
                "format": IDENTITY_FORMAT,
                "shard": self.shard,
                "shards": self.shards,
                "topology": self.topology,
                "layout": self.layout,
                "written_at": self.written_at,
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def decode(cls, raw: bytes, url: str) -> Identity:
        try:
            data = json.loads(raw)
            return cls(
                int(data["shard"]),
                int(data["shards"]),
                str(data["topology"]),
                str(data.get("layout", "")),
                int(data.get("written_at", 0)),
            )
        except (ValueError, TypeError, KeyError) as exc:
            raise SetupError(
                f"{IDENTITY_KEY.decode()} does not hold a stampede shard identity record "
                f"({type(exc).__name__}); another program uses that key name. Rename its "
                "key, or connect with ConnectOptions(check_identity=False)",
                url=redact(url),
                problem="layout",
            ) from None

    @classmethod
    def fresh(cls, shard: int, shards: int, topology: str, layout: str) -> Identity:
        return cls(shard, shards, topology, layout, int(time.time() * 1000))


def layout_digest(table: bytes, patterns: Sequence[str | bytes]) -> str:
    """A short digest of how keys route: the slot owners and the hash patterns."""
    digest = hashlib.sha1(table)
    for pattern in patterns:
        digest.update(b"\0" + (pattern.encode() if isinstance(pattern, str) else pattern))
    return digest.hexdigest()[:16]


_FIX = (
    "If the servers really were re-sharded (keys moved to match the new list), "
    "accept the new layout: connect with ConnectOptions(check_identity=False) and "
    "call `await st.topology.write_identity()` once (docs/operations.md, Connecting)."
)


def check_identities(
    urls: Sequence[str], records: Sequence[Identity | None], layout: str
) -> str | None:
    """The deployment id the present records agree on (None: no record yet).

    `SetupError` when a record says its server is another shard, of another number
    of shards, of another deployment or slot layout than `urls` (in order) say.
    """
    present = [(i, r) for i, r in enumerate(records) if r is not None]
    if not present:
        return None
    given = _Given(urls, records, layout, *present[0])
    for problem, wrong in _IDENTITY_CHECKS:
        for i, rec in present:
            message = wrong(given, i, rec)
            if message is not None:
                raise SetupError(f"{message} {_FIX}", url=redact(urls[i]), problem=problem)
    first = present[0][1]
    return first.topology


class _Given(NamedTuple):
    """What `check_identities` compares each shard's record with."""

    urls: Sequence[str]
    records: Sequence[Identity | None]
    layout: str
    first_i: int
    first: Identity


def _deployment(given: _Given, i: int, rec: Identity) -> str | None:
    if rec.topology == given.first.topology:
        return None
    return (
        f"belongs to another stampede deployment (identity {rec.topology}) than "
        f"{redact(given.urls[given.first_i])} (identity {given.first.topology}); these "
        "servers were never sharded together. Check the URLs."
    )


def _count(given: _Given, i: int, rec: Identity) -> str | None:
    n = len(given.urls)
    if rec.shards == n:
        return None
    return (
        f"holds shard #{rec.shard + 1} of {rec.shards}, but {n} URL(s) were given: the "
        f"data was written over {rec.shards} shards, and keys would now be looked for "
        f"on the wrong servers. List the same {rec.shards} primaries."
    )


def _place(given: _Given, i: int, rec: Identity) -> str | None:
    if rec.shard == i:
        return None
    order = _order(given.urls, given.records)
    hint = "" if order is None else " List them as: " + ", ".join(map(redact, order)) + "."
    return (
        f"is listed as shard #{i + 1} but holds shard #{rec.shard + 1} of "
        f"{len(given.urls)}: the URLs are in another order than the data was written "
        f"with, so keys would be looked for on the wrong servers.{hint}"
    )


def _layout(given: _Given, i: int, rec: Identity) -> str | None:
    if not rec.layout or rec.layout == given.layout:
        return None
    return (
        "was written with another slot map or hash_pattern than this connect() "
        "gives, so keys would be looked for on the wrong servers; pass the slot_map "
        "and hash_pattern the data was written with."
    )


_IDENTITY_CHECKS = (
    ("order", _deployment),
    ("count", _count),
    ("order", _place),
    ("layout", _layout),
)
"""Each check in turn over every record (the first that fails is the one reported)."""


def _order(urls: Sequence[str], records: Sequence[Identity | None]) -> list[str] | None:
    """The URLs in the order their records say, when every record is there."""
    if any(r is None for r in records):
        return None
    slots: list[str | None] = [None] * len(urls)
    for url, rec in zip(urls, records, strict=True):
        assert rec is not None
        if not 0 <= rec.shard < len(urls) or slots[rec.shard] is not None:
            return None
        slots[rec.shard] = url
    return [u for u in slots if u is not None]


async def cluster_mode(url: str, options: ConnectOptions | None = None) -> bool | None:
    """Whether the server at `url` runs in cluster mode; None when it cannot be asked."""
    lane = Lane(parse_url(url, options), retries=0)
    try:
        info = await probe(lane, url)
    except SetupError:
        return None
    finally:
        await lane.aclose()
    return info.cluster_enabled
