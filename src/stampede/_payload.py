"""A write's values as the payload bytes stampede stores."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from .errors import InvalidValueError

__all__ = ["as_payload", "payloads_of"]


def as_payload(key: bytes, value: object) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        try:
            return value.encode()
        except UnicodeEncodeError as exc:
            raise InvalidValueError(
                f"value for key {key!r} is a str that cannot be encoded as UTF-8 "
                f"({exc.reason}); pass its raw bytes instead (nothing was written)",
                key=key,
            ) from None
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    raise InvalidValueError(
        f"value for key {key!r} must be bytes or str, got {type(value).__name__}; "
        "serialise it first (or use stampede.TypedGroup for pydantic models)",
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
