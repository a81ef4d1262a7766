"""OpenTelemetry spans for stampede's own operations, when OpenTelemetry is installed.

`pip install 'stampede-redis[otel]'` (the OpenTelemetry API) and configure an SDK
as usual; stampede then records, on the tracer named `stampede`:

- `stampede.write`: group, keys, mode, version, token, atomic, superseded;
- `stampede.read`: group, keys, mode, status, attempts, reason, repaired, queued;
- `stampede.transaction`: keys, version, token, atomic, pending;
- `stampede.read_atomic`: keys, rounds, attempts;
- `stampede.repair_job` (the worker): group, job, action.

Each attribute is named `stampede.<name>`. An error ends the span with its
exception recorded. Attributes carry names and counts, never payloads. Without
OpenTelemetry, or before a tracer provider is configured, every call here is a
no-op that costs one check (no span object, no context change). A provider
configured after stampede's first operation is seen within a second (at once
after `stampede.tracing.refresh()`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

__all__ = ["IDLE", "Span", "recording", "refresh", "span"]

_trace: Any
try:  # an optional dependency: the `otel` extra
    from opentelemetry import trace as _otel_trace

    _trace = _otel_trace
except ImportError:  # pragma: no cover - exercised where OpenTelemetry is absent
    _trace = None


_tracer: Any = None


class Span:
    """What a stampede operation sets on its span (a no-op without OpenTelemetry)."""

    __slots__ = ("_span",)

    def __init__(self, span: Any = None) -> None:
        self._span = span

    @property
    def recording(self) -> bool:
        """True when a span records (worth computing attributes for)."""
        return self._span is not None

    def set(self, **attributes: str | int | float | bool | None) -> None:
        """Set `stampede.<name>` attributes; None values are left out."""
        if self._span is None:
            return
        for name, value in attributes.items():
            if value is not None:
                self._span.set_attribute(f"stampede.{name}", value)


class _Idle:
    """The span of an operation when nothing records spans: enters as a no-op `Span`."""

    __slots__ = ()

    def __enter__(self) -> Span:
        return _IDLE_SPAN

    def __exit__(self, *exc_info: object) -> None:
        return None


_IDLE_SPAN = Span()
_IDLE = _Idle()
IDLE: AbstractContextManager[Span] = _IDLE
"""What `span` returns when nothing records spans (entered: a no-op `Span`)."""


def span(name: str, **attributes: str | int | float | bool | None) -> AbstractContextManager[Span]:
    """A span named `stampede.<name>` around an operation (see the module table)."""
    if not recording():
        return _IDLE  # nothing records: no span, no context change
    return _recorded(name, attributes)


_configured = False
_checked_at = -1.0
_RECHECK = 1.0
"""Seconds between two looks for a tracer provider while none is configured."""


def recording() -> bool:
    """True once an OpenTelemetry tracer provider is configured (an operation may skip
    `span`, and naming its attributes, while it is False).

    OpenTelemetry allows one provider per process, set once: when one is seen it
    stays. While none is, the check (an environment lookup inside OpenTelemetry)
    runs at most once a second, so spans start within a second of configuring it;
    `refresh()` looks at once.
    """
    global _configured, _checked_at
    if _configured:
        return True
    if _trace is None:
        return False
    now = time.monotonic()
    if now - _checked_at < _RECHECK:
        return False
    _checked_at = now
    _configured = not isinstance(_trace.get_tracer_provider(), _trace.ProxyTracerProvider)
    return _configured


def refresh() -> None:
    """Look for a tracer provider now (one configured within the last second is
    otherwise seen at the next check)."""
    global _checked_at
    _checked_at = -1.0


@contextmanager
def _recorded(name: str, attributes: dict[str, str | int | float | bool | None]) -> Iterator[Span]:
    global _tracer
    if _tracer is None:  # a proxy: it follows a tracer provider configured later
        _tracer = _trace.get_tracer("stampede")
    with _tracer.start_as_current_span(f"stampede.{name}") as current:
        wrapped = Span(current)
        wrapped.set(**attributes)
        yield wrapped
