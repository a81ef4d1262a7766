"""The errors stampede's transport raises or returns: a reply error and its kinds
(told apart by the reply's first word), a lost connection, a timeout.

An error reply of one command comes back as that command's result (`kind_of`
turns hiredis's generic reply error into its kind); a lost connection or a
timeout fails the whole pipeline.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "PLAIN",
    "AskError",
    "AuthError",
    "BusyLoadingError",
    "ClientClosed",
    "ClusterDownError",
    "ConnectTimeout",
    "ConnectionLost",
    "MasterDownError",
    "MovedError",
    "NoPermissionError",
    "NoScriptError",
    "ReadOnlyError",
    "RedisError",
    "ReplyError",
    "ReplyTimeout",
    "TryAgainError",
    "is_auth_refusal",
    "kind_of",
    "kinds_in",
]


class RedisError(Exception):
    """What the transport raises: a reply error, a lost connection or a timeout."""


class ReplyError(RedisError):
    """The server answered one command with an error reply (`-ERR ...`)."""

    @property
    def code(self) -> str:
        """The error's first word: ERR, WRONGTYPE, NOSCRIPT, MOVED..."""
        text = str(self.args[0]) if self.args else ""
        return text.split(" ", 1)[0]


class NoScriptError(ReplyError):
    """EVALSHA of a script the server has not cached (NOSCRIPT)."""


class _Redirect(ReplyError):
    """MOVED or ASK: `slot` is served by `host:port`."""

    @property
    def slot(self) -> int:
        return int(str(self.args[0]).split()[1])

    @property
    def address(self) -> str:
        return str(self.args[0]).split()[2]

    @property
    def host(self) -> str:
        return self.address.rsplit(":", 1)[0]

    @property
    def port(self) -> int:
        return int(self.address.rsplit(":", 1)[1])


class MovedError(_Redirect):
    """MOVED: the slot lives on another node for good."""


class AskError(_Redirect):
    """ASK: the slot is migrating; ask the importing node once, after ASKING."""


class TryAgainError(ReplyError):
    """TRYAGAIN: a multi-key command's keys are split by a migrating slot."""


class ClusterDownError(ReplyError):
    """CLUSTERDOWN: the cluster cannot serve the slot now."""


class BusyLoadingError(ReplyError):
    """LOADING: the server is still loading its dataset."""


class ReadOnlyError(ReplyError):
    """READONLY: a write sent to a replica."""


class MasterDownError(ReplyError):
    """MASTERDOWN: a replica lost its link to its primary (replica-serve-stale-data no)."""


class NoPermissionError(ReplyError):
    """NOPERM: the ACL user may not run the command or touch the key."""


class AuthError(RedisError):
    """The server refused the credentials (or wanted some): never a lost reply."""


class ConnectionLost(RedisError):
    """The connection failed (or could not be made); replies not yet read are lost."""


class ConnectTimeout(ConnectionLost):
    """Connecting (or the TLS handshake, or the hello) took longer than `connect_timeout`."""


class ClientClosed(RedisError):
    """The client was closed (`aclose`): nothing was sent, and no connection is opened
    until it is opened again. Not a lost connection: nothing retries it."""


class ReplyTimeout(RedisError):
    """No reply within the socket timeout; the connection was closed."""


_KINDS: dict[str, type[ReplyError]] = {
    "NOSCRIPT": NoScriptError,
    "MOVED": MovedError,
    "ASK": AskError,
    "TRYAGAIN": TryAgainError,
    "CLUSTERDOWN": ClusterDownError,
    "LOADING": BusyLoadingError,
    "READONLY": ReadOnlyError,
    "MASTERDOWN": MasterDownError,
    "NOPERM": NoPermissionError,
}
_AUTH_CODES = frozenset({"NOAUTH", "WRONGPASS"})


def kind_of(error: ReplyError) -> ReplyError:
    """The specific kind of an error reply (hiredis makes them all `ReplyError`)."""
    kind = _KINDS.get(error.code)
    return error if kind is None else kind(*error.args)


def is_auth_refusal(reply: object) -> bool:
    """True for a refusal of the credentials (NOAUTH, WRONGPASS, AUTH without a password)."""
    if not isinstance(reply, ReplyError):
        return False
    text = str(reply)
    return reply.code in _AUTH_CODES or (
        "AUTH" in text and ("password" in text or "invalid username" in text)
    )


def kinds_in(reply: list[Any]) -> list[Any]:
    """An array reply with its nested error replies given their kinds (EXEC, scripts)."""
    if PLAIN.issuperset(map(type, reply)):  # no error, no array in it: one C-level scan
        return reply
    for i, item in enumerate(reply):
        if isinstance(item, ReplyError):
            reply[i] = kind_of(item)
        elif isinstance(item, list):
            kinds_in(item)
    return reply


PLAIN = frozenset({int, bytes, type(None)})
"""The types of an array reply's items that `kinds_in` leaves as they are."""
