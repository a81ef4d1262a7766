"""A typed layer: one pydantic model per part of a group.

```python
class Profile(BaseModel): name: str
class Settings(BaseModel): theme: str = "light"

class UserParts(TypedDict):
    profile: Profile
    settings: Settings

users = TypedGroup(UserParts)
await users.write(st, "user:{42}", {"profile": Profile(name="Ada"), "settings": Settings()})
got = await users.read(st, "user:{42}")
got.parts["profile"].name      # "Ada"; mypy --strict knows got.parts["profile"] is a Profile
```

`TypedGroup` is generic over its parts: given a `TypedDict` of models, mypy checks
what `write` is given and types `TypedRead.parts`. A plain mapping
(`TypedGroup({"profile": Profile, "settings": Settings})`) works too, untyped.

Each part is stored under `<group>:<part>` as JSON inside the envelope. A stored
value that does not validate raises `ModelValidationError` naming the key and the
failing fields. The payload codec is JSON by default (`JsonCodec`); any `PayloadCodec` (msgpack,
a compressed form...) can take its place. A part added to the model later can have a default
(`defaults={"prefs": Prefs()}`): groups written before it existed read whole,
with the default in its place, until they are written again.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar, Unpack, overload

from pydantic import BaseModel, ValidationError
from pydantic_core import PydanticSerializationError

from .errors import (
    ConfigurationError,
    InvalidKeyError,
    InvalidValueError,
    ModelValidationError,
    TornReadError,
)
from .keys import to_bytes
from .results import ReadResult, Receipt
from .typing import PayloadCodec
from .verdict import Mode, Status

if TYPE_CHECKING:
    from ._client import ModeName, ReadOptions, Stampede
    from ._txn import Transaction
    from .verdict import Observation

__all__ = ["JsonCodec", "TypedGroup", "TypedRead"]

M = TypeVar("M", bound=BaseModel)


class JsonCodec:
    """The default `PayloadCodec`: each part as its model's JSON (`model_dump_json`)."""

    def encode(self, value: BaseModel) -> bytes:
        return value.model_dump_json().encode()

    def decode(self, model: type[M], payload: bytes) -> M:
        return model.model_validate_json(payload)

    def __repr__(self) -> str:
        return "JsonCodec()"


T = TypeVar("T", bound=Mapping[str, object])


@dataclass(frozen=True, slots=True)
class TypedRead(Generic[T]):
    """A typed group read: each part as its model (None when the group is not found).

    `parts` is typed by the group's `TypedDict`: `got.parts["profile"]` is a
    `Profile` to mypy. `got["profile"]` is the same value, untyped.
    """

    parts: T
    result: ReadResult[str]
    defaulted: tuple[str, ...] = ()
    """Parts not stored yet (added later) that were filled in with their defaults."""

    @property
    def consistent(self) -> bool:
        """True when the parts are one whole write, or the group is not found."""
        return self.result.consistent

    @property
    def found(self) -> bool:
        """False when the group is not found (never written, deleted or expired)."""
        return self.result.found

    def __getitem__(self, part: str) -> Any:
        """`got["profile"]`: the part's model, untyped (`got.parts["profile"]` is typed)."""
        return self.parts[part]


def _models_of(parts: object) -> dict[str, type[BaseModel]]:
    """part -> model class, from a TypedDict class or a mapping; `ConfigurationError` if not."""
    if isinstance(parts, type) and typing.is_typeddict(parts):
        hints = typing.get_type_hints(parts)
        models: dict[str, Any] = {}
        for name, hint in hints.items():
            args = [a for a in typing.get_args(hint) if a is not type(None)]
            models[name] = args[0] if len(args) == 1 else hint
        return _checked(models)
    if not isinstance(parts, Mapping):
        what = f"the class {parts.__name__}" if isinstance(parts, type) else type(parts).__name__
        raise ConfigurationError(
            "TypedGroup takes a TypedDict of pydantic models or a mapping part -> model "
            f"class, e.g. TypedGroup({{'profile': Profile}}), got {what}"
        )
    return _checked(dict(parts))


def _checked(models: dict[str, Any]) -> dict[str, type[BaseModel]]:
    if not models:
        raise ConfigurationError("TypedGroup needs at least one part")
    for name, model in models.items():
        if not isinstance(name, str) or not name or "{" in name or "}" in name:
            raise ConfigurationError(f"part name {name!r} must be non-empty text, without braces")
        if isinstance(model, BaseModel):
            raise ConfigurationError(
                f"part {name!r} maps to an instance of {type(model).__name__}; give the "
                f"model class: {{{name!r}: {type(model).__name__}}}"
            )
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise ConfigurationError(
                f"part {name!r} must map to a pydantic model class, got {model!r}"
            )
    return models


class TypedGroup(Generic[T]):
    """The parts of a group and the pydantic model each one holds."""

    @overload
    def __init__(
        self: TypedGroup[dict[str, Any]],
        parts: Mapping[str, type[BaseModel]],
        *,
        separator: str = ":",
        defaults: Mapping[str, BaseModel] | None = None,
        codec: PayloadCodec | None = None,
    ) -> None: ...

    @overload
    def __init__(
        self,
        parts: type[T],
        *,
        separator: str = ":",
        defaults: Mapping[str, BaseModel] | None = None,
        codec: PayloadCodec | None = None,
    ) -> None: ...

    def __init__(
        self,
        parts: Any,
        *,
        separator: str = ":",
        defaults: Mapping[str, BaseModel] | None = None,
        codec: PayloadCodec | None = None,
    ) -> None:
        self.parts = _models_of(parts)
        self.codec: PayloadCodec = JsonCodec() if codec is None else codec
        if not isinstance(self.codec, PayloadCodec):
            raise ConfigurationError(
                f"codec must be a PayloadCodec (encode, decode), got {type(codec).__name__}"
            )
        if not isinstance(separator, str) or not separator:
            raise ConfigurationError(f"separator must be non-empty text, got {separator!r}")
        self.separator = separator
        self.defaults: dict[str, BaseModel] = {}
        for part, value in (defaults or {}).items():
            model = self.parts.get(part)
            if model is None:
                raise ConfigurationError(
                    f"default for unknown part {part!r}; parts: {sorted(self.parts)}"
                )
            if not isinstance(value, model):
                raise ConfigurationError(
                    f"the default of part {part!r} must be a {model.__name__} instance, "
                    f"e.g. {model.__name__}()"
                )
            self.defaults[part] = value
        if len(self.defaults) == len(self.parts):
            raise ConfigurationError(
                "every part has a default, so a group could read whole with nothing "
                "stored; defaults are for parts added after groups were written"
            )

    def key(self, group: str, part: str) -> str:
        return f"{group}{self.separator}{part}"

    def keys(self, group: str) -> dict[str, str]:
        """part -> key, in the order the parts were declared."""
        if not isinstance(group, str):
            raise InvalidValueError(
                f"a typed group's name must be text, got {type(group).__name__}; e.g. 'user:{{42}}'"
            )
        return {part: self.key(group, part) for part in self.parts}

    async def write(
        self,
        st: Stampede,
        group: str,
        values: T | None = None,
        /,
        *,
        mode: ModeName | None = None,
        ttl: float | None = None,
        version: int | None = None,
        **parts: Any,
    ) -> Receipt:
        """Write every part (all of them: a logical write covers the whole group).

        Give the parts as one mapping (checked by mypy against the `TypedDict`) or as
        keywords; `mode`, `ttl` and `version` are per-call options as in
        `Stampede.write` (a part named like one of them goes in the mapping).
        """
        payloads = self._payloads(group, values, parts)
        return await st.write(group, payloads, mode=mode, ttl=ttl, version=version)

    def _payloads(
        self, group: str, values: Mapping[str, Any] | None, parts: Mapping[str, Any]
    ) -> dict[str, bytes]:
        """key -> JSON of every part, validated; the parts as a mapping or keywords."""
        if values is not None:
            if not isinstance(values, Mapping):
                raise InvalidValueError(
                    f"write of {group!r} takes the parts as a mapping part -> model, got "
                    f"{type(values).__name__}"
                )
            if parts:
                raise ConfigurationError(
                    f"write of {group!r}: give the parts as a mapping or as keywords, not both"
                )
            given: dict[str, Any] = dict(values)
        else:
            given = dict(parts)
        keys = self.keys(group)
        missing = set(self.parts) - set(given)
        extra = set(given) - set(self.parts)
        if missing or extra:
            raise ConfigurationError(
                f"write of {group!r} must give exactly the parts {sorted(self.parts)}; "
                f"missing {sorted(missing)}, unknown {sorted(extra)}"
            )
        payloads: dict[str, bytes] = {}
        for part, model in self.parts.items():
            value = given[part]
            if not isinstance(value, model):
                value = self._validate(keys[part], model, value)
            try:
                payloads[keys[part]] = self.codec.encode(value)
            except (PydanticSerializationError, UnicodeEncodeError) as exc:
                why = f"cannot be encoded: {exc}; its text must be UTF-8 (no lone surrogates)"
                raise InvalidValueError(f"part {part!r} of {group!r} {why}") from None
        return payloads

    def set(self, tx: Transaction, group: str, values: T | None = None, /, **parts: Any) -> None:
        """Write every part of `group` in the read-atomic transaction `tx`.

        Several groups can change in one transaction (a transfer between two
        users); `read_atomic` then never sees one changed without the other.
        """
        for key, payload in self._payloads(group, values, parts).items():
            tx.set(key, payload)

    async def read_atomic(self, st: Stampede, groups: Sequence[str]) -> dict[str, T | None]:
        """Every part of each of `groups`, read atomically (see `Stampede.read_atomic`):
        group -> its parts as models, or None when none of its keys exists."""
        if isinstance(groups, str | bytes):
            raise InvalidKeyError(
                f"read_atomic() takes a list of group names, got one name {groups!r}; "
                f"write [{groups!r}]",
                key=groups,
            )
        keys = {group: self.keys(group) for group in groups}
        got = await st.read_atomic([k for per in keys.values() for k in per.values()])
        out: dict[str, T | None] = {}
        for group, per in keys.items():
            raw = {part: got.values[key] for part, key in per.items()}
            if all(v is None for v in raw.values()):
                out[group] = None
                continue
            parts: dict[str, BaseModel | None] = {
                part: None if value is None else self._validate(per[part], self.parts[part], value)
                for part, value in raw.items()
            }
            out[group] = typing.cast(T, parts)
        return out

    async def read(self, st: Stampede, group: str, **options: Unpack[ReadOptions]) -> TypedRead[T]:
        """Read every part as one group and validate each against its model.

        `options` are `Stampede.read`'s (`mode`, `retry`, `repair`; `ReadOptions`).
        """
        keys = self.keys(group)
        try:
            result = await st.read(group, list(keys.values()), **options)
        except TornReadError as exc:
            filled = self._with_defaults(group, keys, exc.observation)
            if filled is None:
                raise
            return filled
        if not result.consistent and result.observation is not None:
            filled = self._with_defaults(group, keys, result.observation)
            if filled is not None:
                return filled
        parts: dict[str, BaseModel | None] = {}
        for part, key in keys.items():
            raw = result.values[key]
            parts[part] = None if raw is None else self._validate(key, self.parts[part], raw)
        return TypedRead(typing.cast(T, parts), result)

    def _with_defaults(
        self, group: str, keys: dict[str, str], obs: Observation
    ) -> TypedRead[T] | None:
        """The read of a group written before its defaulted parts existed, else None.

        Whole means: every part missing has a default, and every part present
        carries one and the same stamp (the group's last write, before the parts
        were added).
        """
        if not self.defaults:
            return None
        by_key = dict(zip(obs.keys, zip(obs.raw, obs.envelopes, strict=True), strict=True))
        stamps: set[tuple[int, str]] = set()
        missing: list[str] = []
        for part, key in keys.items():
            raw, env = by_key.get(to_bytes(key), (None, None))
            if raw is None:
                if part not in self.defaults:
                    return None
                missing.append(part)
            elif env is None or env.tombstone:
                return None
            else:
                stamps.add((env.version, env.token))
        if len(stamps) != 1 or not missing:
            return None
        (version, token) = stamps.pop()
        if obs.mode is Mode.COMMIT and not _committed_without(obs, version, token, keys, missing):
            return None
        parts: dict[str, BaseModel | None] = {}
        values: dict[str, bytes | None] = {}
        for part, key in keys.items():
            if part in missing:
                parts[part] = self.defaults[part]
                values[key] = None
            else:
                raw, env = by_key[to_bytes(key)]
                assert env is not None
                parts[part] = self._validate(key, self.parts[part], env.payload)
                values[key] = env.payload
        result = ReadResult(
            group=obs.group,
            status=Status.CONSISTENT,
            values=values,
            version=version,
            token=token,
            observation=obs,
        )
        return TypedRead(typing.cast(T, parts), result, tuple(missing))

    def _validate(self, key: str, model: type[BaseModel], raw: Any) -> BaseModel:
        try:
            if isinstance(raw, bytes):
                return self.codec.decode(model, raw)
            if isinstance(raw, str):
                return model.model_validate_json(raw)
            return model.model_validate(raw)
        except ValidationError as exc:
            fields = [".".join(str(p) for p in err["loc"]) or "(the value)" for err in exc.errors()]
            raise ModelValidationError(
                to_bytes(key), model.__name__, exc.error_count(), fields=fields
            ) from None


def _committed_without(
    obs: Observation, version: int, token: str, keys: dict[str, str], missing: list[str]
) -> bool:
    """In commit mode: the group's record commits the write the present parts hold
    (its stamp) and that write did not cover the missing parts (else they were lost,
    or the write is uncommitted: no default stands in for them)."""
    record = obs.commit()
    if record is None or (record.version, record.token) != (version, token):
        return False
    present = {to_bytes(key) for part, key in keys.items() if part not in missing}
    absent = {to_bytes(keys[part]) for part in missing}
    return record.keys.issuperset(present) and not (record.keys & absent)
