"""Commands as the `atomic` helpers take them: which keys each touches, and the checks
that refuse what is not a command, a key list or a count (pure: no I/O)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeAlias

from .errors import InvalidKeyError, InvalidValueError
from .keys import to_bytes

__all__ = ["Command", "commands_of", "key_list", "keys_of", "listed", "mapping"]

Command: TypeAlias = tuple[Any, ...]
"""One Redis command as a tuple: `("SET", key, value)`, `("HINCRBY", key, field, 1)`."""

# Where each known command keeps its keys (upper-case names).
_FIRST = frozenset(
    """GET SET SETNX SETEX PSETEX GETSET GETDEL GETEX APPEND INCR INCRBY INCRBYFLOAT DECR
    DECRBY STRLEN SETRANGE GETRANGE SETBIT GETBIT BITCOUNT EXPIRE PEXPIRE EXPIREAT PEXPIREAT
    PERSIST TTL PTTL TYPE HSET HSETNX HGET HMGET HMSET HDEL HINCRBY HINCRBYFLOAT HGETALL HKEYS
    HVALS HLEN HEXISTS LPUSH RPUSH LPUSHX RPUSHX LPOP RPOP LRANGE LTRIM LLEN LINDEX LSET LREM
    LINSERT LPOS SADD SREM SISMEMBER SMISMEMBER SMEMBERS SCARD SPOP SRANDMEMBER ZADD ZREM
    ZINCRBY ZSCORE ZMSCORE ZRANGE ZREVRANGE ZRANGEBYSCORE ZREVRANGEBYSCORE ZREMRANGEBYRANK
    ZREMRANGEBYSCORE ZCARD ZCOUNT ZRANK ZREVRANK ZPOPMIN ZPOPMAX XADD XLEN XRANGE XREVRANGE
    XTRIM XDEL PFADD""".split()
)
_ALL = frozenset(
    """DEL UNLINK EXISTS MGET TOUCH SINTER SUNION SDIFF PFCOUNT WATCH SINTERSTORE SUNIONSTORE
    SDIFFSTORE PFMERGE""".split()
)
_FIRST_TWO = frozenset("RENAME RENAMENX SMOVE LMOVE RPOPLPUSH COPY".split())
_PAIRS = frozenset("MSET MSETNX".split())
_NUMKEYS_AT_1 = frozenset("EVAL EVALSHA EVAL_RO EVALSHA_RO FCALL FCALL_RO".split())
_DEST_NUMKEYS = frozenset("ZUNIONSTORE ZINTERSTORE ZDIFFSTORE".split())


def keys_of(command: Command) -> list[bytes] | None:
    """The keys `command` touches, or None when stampede does not know the command.

    Covers the usual string, hash, list, set, sorted-set, stream and key commands
    (`SET`, `HINCRBY`, `RPUSH`, `ZADD`, `DEL`, `MSET`, `EVALSHA`, ...).
    """
    command = _command(command)
    head = command[0]
    name = (head.decode("utf-8", "replace") if isinstance(head, bytes) else str(head)).upper()
    args = command[1:]
    picked: Sequence[Any]
    if name in _FIRST:
        picked = args[:1]
    elif name in _ALL:
        picked = args
    elif name in _FIRST_TWO:
        picked = args[:2]
    elif name in _PAIRS:
        picked = args[::2]
    elif name in _NUMKEYS_AT_1:
        picked = args[2 : 2 + _numkeys(name, args[1])] if len(args) > 1 else ()
    elif name in _DEST_NUMKEYS:
        picked = [*args[:1], *args[2 : 2 + _numkeys(name, args[1])]] if len(args) > 1 else args[:1]
    else:
        return None
    return [to_bytes(k) for k in picked]


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _command(command: Any) -> Command:
    """`command` as a tuple; `InvalidValueError` for one that is not a command."""
    if isinstance(command, str | bytes | bytearray) or not isinstance(command, Sequence):
        got = f"got {type(command).__name__} {_shown(command)}"
        raise InvalidValueError(f"a command must be a tuple such as ('SET', key, value), {got}")
    if not command:
        raise InvalidValueError("an empty command; write it as a tuple such as ('SET', key, value)")
    return tuple(command)


def commands_of(commands: Any, what: str) -> list[Command]:
    """Every command of `commands` as a tuple, checked (`_command`); `what` says who
    takes them in a refusal ("multi() takes")."""
    if isinstance(commands, str | bytes | bytearray) or not isinstance(commands, Iterable):
        got = f"got {type(commands).__name__} {_shown(commands)}"
        raise InvalidValueError(f"{what} a list of command tuples, {got}")
    return [_command(c) for c in commands]


def _numkeys(name: str, given: Any) -> int:
    """The numkeys argument of `name`; `InvalidKeyError` when it is no count."""
    try:
        count = int(given.decode() if isinstance(given, bytes) else given)
    except (TypeError, ValueError, UnicodeDecodeError):
        count = -1
    if count < 0:
        raise InvalidKeyError(
            f"{name} takes the number of its keys before them, got {_shown(given)}; "
            f"write e.g. ({name!r}, ..., 2, key1, key2, ...)"
        )
    return count


def listed(
    items: Any,
    what: str,
    error: type[InvalidKeyError | InvalidValueError] = InvalidKeyError,
    *,
    empty: str | None = None,
) -> list[Any]:
    """`items` as a list; one str or bytes is refused with `error` (read as a sequence,
    it would give one item per character), and so is anything that is not iterable.
    With `empty` (what the items are for), no items is an `InvalidKeyError` too."""
    if isinstance(items, str | bytes | bytearray) or not isinstance(items, Iterable):
        hint = f"not one {type(items).__name__}; write [{_shown(items)}]"
        got = hint if isinstance(items, str | bytes | bytearray) else f"got {type(items).__name__}"
        raise error(f"{what} must be a list, {got}", key=None)
    found = list(items)
    if empty is not None and not found:
        raise InvalidKeyError(f"{what} must not be empty: {empty}", key=None)
    return found


def key_list(keys: Any, operation: str) -> list[bytes]:
    """`keys` as a list of bytes (`listed`, `to_bytes`)."""
    return [to_bytes(k) for k in listed(keys, f"the keys of {operation}")]


def mapping(given: Any, what: str) -> Mapping[Any, Any]:
    """`given` if it is a non-empty mapping; a `StampedeError` saying what to pass otherwise."""
    if not isinstance(given, Mapping):
        got = type(given).__name__
        raise InvalidValueError(f"{what} takes a mapping {{name: value, ...}}, got {got}")
    if not given:
        raise InvalidKeyError(f"{what} got an empty mapping; pass {{name: value, ...}}")
    return given
