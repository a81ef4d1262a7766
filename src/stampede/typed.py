"""A typed layer: one pydantic model per part of a group.

```python
class Profile(BaseModel): name: str
class Settings(BaseModel): theme: str = "light"

users = TypedGroup({"profile": Profile, "settings": Settings})
await users.write(st, "user:{42}", profile=Profile(name="Ada"), settings=Settings())
got = await users.read(st, "user:{42}")
got.parts["profile"].name                       # "Ada"
```

Each part is stored under `<group>:<part>` as JSON inside the envelope. A stored
value that does not validate raises `ModelValidationError` naming the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from .errors import ConfigurationError, ModelValidationError
from .keys import to_bytes
from .results import ReadResult, Receipt

if TYPE_CHECKING:
    from .client import Stampede

__all__ = ["TypedGroup", "TypedRead"]


@dataclass(frozen=True, slots=True)
class TypedRead:
    """A typed group read: each part as its model (None when the group is not found)."""

    parts: Mapping[str, BaseModel | None]
    result: ReadResult[str]

    @property
    def consistent(self) -> bool:
        return self.result.consistent

    def __getitem__(self, part: str) -> BaseModel | None:
        return self.parts[part]


class TypedGroup:
    """The parts of a group and the pydantic model each one holds."""

    def __init__(self, parts: Mapping[str, type[BaseModel]], *, separator: str = ":") -> None:
        if not parts:
            raise ConfigurationError("TypedGroup needs at least one part")
        for name, model in parts.items():
            if not name or "{" in name or "}" in name:
                raise ConfigurationError(f"part name {name!r} must be non-empty, without braces")
            if not (isinstance(model, type) and issubclass(model, BaseModel)):
                raise ConfigurationError(f"part {name!r} must map to a pydantic model class")
        self.parts = dict(parts)
        self.separator = separator

    def key(self, group: str, part: str) -> str:
        return f"{group}{self.separator}{part}"

    def keys(self, group: str) -> dict[str, str]:
        """part -> key, in the order the parts were declared."""
        return {part: self.key(group, part) for part in self.parts}

    async def write(self, st: Stampede, group: str, /, **values: Any) -> Receipt:
        """Write every part (all of them: a logical write covers the whole group)."""
        missing = set(self.parts) - set(values)
        extra = set(values) - set(self.parts)
        if missing or extra:
            raise ConfigurationError(
                f"write of {group!r} must give exactly the parts {sorted(self.parts)}; "
                f"missing {sorted(missing)}, unknown {sorted(extra)}"
            )
        payloads: dict[str, bytes] = {}
        for part, model in self.parts.items():
            value = values[part]
            if not isinstance(value, model):
                value = self._validate(self.key(group, part), model, value)
            payloads[self.key(group, part)] = value.model_dump_json().encode()
        return await st.write(group, payloads)

    async def read(self, st: Stampede, group: str, **read_options: Any) -> TypedRead:
        keys = self.keys(group)
        result = await st.read(group, list(keys.values()), **read_options)
        parts: dict[str, BaseModel | None] = {}
        for part, key in keys.items():
            raw = result.values[key]
            parts[part] = None if raw is None else self._validate(key, self.parts[part], raw)
        return TypedRead(parts, result)

    @staticmethod
    def _validate(key: str, model: type[BaseModel], raw: Any) -> BaseModel:
        try:
            if isinstance(raw, bytes | str):
                return model.model_validate_json(raw)
            return model.model_validate(raw)
        except ValidationError as exc:
            raise ModelValidationError(to_bytes(key), model.__name__, exc.error_count()) from None
