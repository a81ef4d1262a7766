"""Resolve a strategy given on the command line: a built-in name or `module:factory`."""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from ..errors import ConfigurationError
from .base import RepairStrategy
from .strategies import NewestWins

__all__ = ["BUILTIN", "load_strategy"]

BUILTIN = {"newest-wins": NewestWins}


async def load_strategy(spec: str) -> RepairStrategy:
    """`newest-wins`, or `package.module:factory` (a strategy, or a callable returning one)."""
    if spec in BUILTIN:
        return BUILTIN[spec]()
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigurationError(
            f"strategy {spec!r} is neither a built-in ({', '.join(BUILTIN)}) nor "
            "'module:factory', e.g. 'myapp.repairs:make_strategy'"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(
            f"strategy {spec!r}: cannot import {module_name!r} ({exc}); is it installed "
            "and on PYTHONPATH?"
        ) from None
    try:
        target: Any = getattr(module, attr)
    except AttributeError:
        raise ConfigurationError(f"strategy {spec!r}: {module_name} has no {attr!r}") from None
    if not isinstance(target, RepairStrategy) and callable(target):
        try:
            target = target()
            if inspect.isawaitable(target):
                target = await target
        except Exception as exc:
            raise ConfigurationError(
                f"strategy {spec!r}: the factory raised {type(exc).__name__}: {exc}"
            ) from exc
    if not isinstance(target, RepairStrategy):
        raise ConfigurationError(
            f"strategy {spec!r} gave {type(target).__name__}, not a repair strategy "
            "(an object with a `name` and an async `repair(ctx, observation, verdict)`)"
        )
    return target
