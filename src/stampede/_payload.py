"""A write's values as the payload bytes stampede stores."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .errors import InvalidKeyError, InvalidValueError

__all__ = ["as_bytes", "as_payload", "check_mapping", "payloads_of"]


def as_payload(key: bytes, value: object) -> bytes:
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    return as_bytes(
        value,
        f"value for key {key!r}",
        encode="pass its raw bytes instead (nothing was written)",
        kind="serialise it first (or use stampede.TypedGroup for pydantic models)",
        key=key,
    )


def payloads_of(keys: Sequence[bytes], values: Iterable[object]) -> list[bytes | None]:
    """`as_payload` of each value (of the key in the same place)."""
    payloads: list[Any] = list(values)
    if len(payloads) != len(keys):
        raise ValueError("payloads_of() needs one value per key")
    for i, value in enumerate(payloads):
        if type(value) is not bytes:
            payloads[i] = as_payload(keys[i], value)
    return payloads


def as_bytes(
    value: object,
    what: str,
    *,
    encode: str = "pass bytes",
    kind: str = "serialise it first",
    key: bytes | None = None,
) -> bytes:
    """`value` (bytes, or a str as UTF-8); `InvalidValueError` naming `what` otherwise,
    ending with the fix for a str that is not UTF-8 (`encode`) or another type (`kind`)."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        try:
            return value.encode()
        except UnicodeEncodeError as exc:
            problem = f"is a str that cannot be encoded as UTF-8 ({exc.reason}); {encode}"
            raise InvalidValueError(f"{what} {problem}", key=key) from None
    got = type(value).__name__
    raise InvalidValueError(f"{what} must be bytes or str, got {got}; {kind}", key=key)


def check_mapping(value: object, what: str) -> None:
    """`InvalidValueError` unless `value` is a mapping; `InvalidKeyError` if empty."""
    if not isinstance(value, Mapping):
        raise InvalidValueError(f"{what} must be a mapping, got {type(value).__name__}")
    if not value:
        raise InvalidKeyError(f"{what} is empty; pass {{name: value, ...}}")
