"""A mypy plugin: `got["profile"]` of a typed group read is typed by its `TypedDict`.

`TypedGroup(UserParts)` reads give `TypedRead[UserParts]`; mypy types
`got.parts["profile"]` from the `TypedDict` by itself, and with this plugin
`got["profile"]` too (and reports a part the `TypedDict` does not have). Enable it
in the project's mypy configuration:

```toml
[tool.mypy]
plugins = ["stampede.mypy_plugin"]
```

Only mypy imports this module; `import stampede` never does.
"""

from __future__ import annotations

from collections.abc import Callable

from mypy.plugin import MethodContext, Plugin
from mypy.types import Instance, LiteralType, Type, TypedDictType, get_proper_type

__all__ = ["StampedePlugin", "plugin"]

_GETITEM = "stampede._typed.TypedRead.__getitem__"


def _literal_key(ctx: MethodContext) -> str | None:
    if not ctx.arg_types or not ctx.arg_types[0]:
        return None
    key = get_proper_type(ctx.arg_types[0][0])
    if isinstance(key, Instance) and key.last_known_value is not None:
        key = key.last_known_value
    if isinstance(key, LiteralType) and isinstance(key.value, str):
        return key.value
    return None


def _part_type(ctx: MethodContext) -> Type:
    """The `TypedDict` item type of the part a literal key names."""
    owner = get_proper_type(ctx.type)
    if not isinstance(owner, Instance) or not owner.args:
        return ctx.default_return_type
    parts = get_proper_type(owner.args[0])
    name = _literal_key(ctx)
    if not isinstance(parts, TypedDictType) or name is None:
        return ctx.default_return_type
    item = parts.items.get(name)
    if item is None:
        known = ", ".join(sorted(parts.items))
        ctx.api.fail(f'typed group has no part "{name}" (its parts: {known})', ctx.context)
        return ctx.default_return_type
    return item


class StampedePlugin(Plugin):
    """Types `TypedRead.__getitem__` by the group's `TypedDict`."""

    def get_method_hook(self, fullname: str) -> Callable[[MethodContext], Type] | None:
        return _part_type if fullname == _GETITEM else None


def plugin(version: str) -> type[Plugin]:
    """mypy's entry point."""
    return StampedePlugin
