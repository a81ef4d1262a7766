"""Resolve a strategy given on the command line: a built-in name or `module:factory`.

`open_strategy(spec)` is an async context manager, entered in the event loop the
worker runs in (never a loop of its own that closes before the work starts):

- `newest-wins`: a built-in;
- `module:name` naming a strategy instance;
- `module:name` naming a factory (a function, or an async function) returning a
  strategy; a factory's database pool then belongs to the worker's loop;
- `module:name` naming a factory that returns an async context manager (say an
  `@contextlib.asynccontextmanager` function) yielding the strategy: it is
  entered before the first job and exited after the last, SIGTERM included.

A strategy with `on_startup`/`on_shutdown` hooks has them awaited by the worker
itself (see `stampede.repair.StrategyLifecycle`). A strategy *class* is
refused with a message (pass an instance or a factory): the worker would
otherwise call `repair` on the class.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
from collections.abc import AsyncIterator
from typing import Any

from ..errors import ConfigurationError
from ..typing import RepairStrategy
from ._strategies import NewestWins

__all__ = ["BUILTIN", "load_strategy", "open_strategy", "resolve_strategy"]

BUILTIN = {"newest-wins": NewestWins}

_SHAPE = (
    "an object with a `name` and an async `repair(ctx, observation, verdict)`, or a "
    "factory returning one"
)


def resolve_strategy(spec: str) -> Any:
    """Import what `spec` names (no factory is called yet): the object, or a built-in class."""
    if spec in BUILTIN:
        return BUILTIN[spec]
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
            f"strategy {spec!r}: cannot import {module_name!r} ({exc}); is it installed, "
            "on PYTHONPATH, or in the current directory?"
        ) from None
    except Exception as exc:  # the module itself raised on import
        raise ConfigurationError(
            f"strategy {spec!r}: importing {module_name!r} raised {type(exc).__name__}: {exc}"
        ) from exc
    target: Any = module
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ConfigurationError(f"strategy {spec!r}: {module_name} has no {attr!r}") from None
    if inspect.isclass(target):
        raise ConfigurationError(
            f"strategy {spec!r} is the class {target.__name__}, not a strategy: give an "
            f"instance (e.g. `strategy = {target.__name__}(...)` in {module_name}) or a "
            "factory function returning one"
        )
    return target


def _is_context(value: Any) -> bool:
    return (
        not isinstance(value, RepairStrategy)
        and hasattr(value, "__aenter__")
        and hasattr(value, "__aexit__")
    )


def _checked(spec: str, value: Any, what: str) -> RepairStrategy:
    if inspect.isclass(value):
        raise ConfigurationError(
            f"strategy {spec!r}: {what} gave the class {value.__name__}, not an instance "
            f"of it; return {value.__name__}(...)"
        )
    if not isinstance(value, RepairStrategy):
        raise ConfigurationError(
            f"strategy {spec!r}: {what} gave {type(value).__name__}, not a repair strategy "
            f"({_SHAPE})"
        )
    return value


@contextlib.asynccontextmanager
async def open_strategy(spec: str) -> AsyncIterator[RepairStrategy]:
    """The strategy `spec` names, built in the running event loop (see the module doc)."""
    if spec in BUILTIN:
        yield BUILTIN[spec]()
        return
    target = resolve_strategy(spec)
    what = "the object"
    if not isinstance(target, RepairStrategy) and callable(target):
        what = "the factory"
        target = await _built(spec, target)
    async with contextlib.AsyncExitStack() as stack:
        if _is_context(target):
            what = "the factory's context"
            try:
                target = await stack.enter_async_context(target)
            except Exception as exc:
                raise ConfigurationError(
                    f"strategy {spec!r}: entering the factory's context raised "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
        yield _checked(spec, target, what)


async def load_strategy(spec: str) -> RepairStrategy:
    """The strategy `spec` names, for a caller that keeps it for the life of its loop.

    A factory returning an async context manager needs `open_strategy` instead.
    """
    target = resolve_strategy(spec) if spec not in BUILTIN else BUILTIN[spec]()
    if not isinstance(target, RepairStrategy) and callable(target):
        target = await _built(spec, target)
    if _is_context(target):
        raise ConfigurationError(
            f"strategy {spec!r}: the factory returned a context manager; use open_strategy()"
        )
    return _checked(spec, target, "the factory")


async def _built(spec: str, factory: Any) -> Any:
    """What a strategy factory returns (awaited when it is a coroutine)."""
    try:
        target = factory()
        if inspect.isawaitable(target):
            target = await target
    except Exception as exc:
        raise ConfigurationError(
            f"strategy {spec!r}: the factory raised {type(exc).__name__}: {exc}"
        ) from exc
    return target
