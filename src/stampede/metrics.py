"""stampede's own metrics: a `prometheus_client` registry the application can mount, and a hook.

```python
from prometheus_client import make_asgi_app
from stampede import metrics

app.mount("/metrics", make_asgi_app(registry=metrics.REGISTRY))   # stampede's metrics only
metrics.mount()                       # ...or add them to prometheus_client's default registry
metrics.add_hook(lambda name, value, labels: statsd.incr(name, value, tags=labels))
```

- `stampede_torn_reads_total{reason}`: reads that found their group torn, before
  any repair
- `stampede_read_retries_total`: re-reads of a group that looked in flight
- `stampede_repairs_total{action, source}`: repairs by what they did, run by a
  `read` or the `worker`
- `stampede_lost_races_total{source}`: repairs that a newer write beat
- `stampede_write_seconds{outcome}` (histogram; `ok`, `partial`, `error`): stamped
  writes, end to end
- `stampede_worker_retries_total`: repair jobs put back with a backoff delay

`log_event(logger, name, level, **fields)` is the library's structured logging:
the message is `name key=value ...`, and each field is also an `extra` attribute
of the record (`record.event`, `record.group`, ...; `record.stampede_fields`
names them), which `stampede ... --log-format json` prints as one JSON object.

The recording functions below are cheap and never raise: the library calls them
where the event happens. A hook gets `(name, value, labels)` for every event
(the metric name without `_total`), for applications with another metrics
system; a hook that raises is dropped from that call only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from prometheus_client import REGISTRY as DEFAULT_REGISTRY
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

__all__ = [
    "REGISTRY",
    "Hook",
    "add_hook",
    "kept_read",
    "log_event",
    "lost_race",
    "mount",
    "read_retry",
    "remove_hook",
    "repair",
    "torn_read",
    "worker_retry",
    "write_latency",
]

REGISTRY = CollectorRegistry(auto_describe=True)
"""The registry holding stampede's library metrics (not prometheus_client's default)."""

Hook = Callable[[str, float, Mapping[str, str]], None]

_log = logging.getLogger("stampede.metrics")
_hooks: list[Hook] = []

_TORN = Counter(
    "stampede_torn_reads",
    "Reads that found their group torn, before any repair, by reason.",
    ["reason"],
    registry=REGISTRY,
)
_RETRIES = Counter(
    "stampede_read_retries",
    "Re-reads of a group that looked in flight.",
    registry=REGISTRY,
)
_REPAIRS = Counter(
    "stampede_repairs",
    "Repairs by what they did (rewritten, rolled_forward, deleted, already_consistent, "
    "lost_race, queued) and where they ran (read, worker).",
    ["action", "source"],
    registry=REGISTRY,
)
_KEPT = Counter(
    "stampede_kept_reads",
    "Reads of a group whose newest write was in flight, answered by the newest whole "
    "write its keys kept.",
    registry=REGISTRY,
)
_LOST = Counter(
    "stampede_lost_races",
    "Repairs a newer write beat (the group was re-read).",
    ["source"],
    registry=REGISTRY,
)
_WRITES = Histogram(
    "stampede_write_seconds",
    "Stamped writes, end to end, by outcome (ok, partial, error).",
    ["outcome"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
    registry=REGISTRY,
)
_LOST_VERSIONS = Counter(
    "stampede_lost_versions",
    "Keys read_atomic found holding an older value than a transaction that wrote them, "
    "with no record of it (evicted, lost in a failover): read as missing.",
    registry=REGISTRY,
)
_WORKER_RETRIES = Counter(
    "stampede_worker_retries",
    "Repair jobs put back on the queue with a backoff delay after a failed attempt.",
    registry=REGISTRY,
)


# LogRecord attributes an `extra` field must not overwrite (logging raises KeyError).
_RESERVED = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message",
    "asctime",
    "event",
    "stampede_fields",
}


class _Message:
    """A log message rendered only if a handler formats it: `event key=value ...`."""

    __slots__ = ("fields", "name")

    def __init__(self, name: str, fields: dict[str, Any]) -> None:
        self.name = name
        self.fields = fields

    def __str__(self) -> str:
        return " ".join([self.name, *(f"{k}={v}" for k, v in self.fields.items())])


def log_event(logger: logging.Logger, name: str, level: int = logging.INFO, **fields: Any) -> None:
    """Log one structured event: names and counts only, never payloads.

    A field named like a LogRecord attribute gets a trailing underscore on the record;
    text that is not valid UTF-8 (surrogate escapes) is backslash-escaped.
    """
    if not logger.isEnabledFor(level):
        return
    extra: dict[str, Any] = {"event": name}
    names = []
    for key, value in list(fields.items()):
        if type(value) is str and not value.isascii():  # text any handler can write
            value = fields[key] = value.encode("utf-8", "backslashreplace").decode()
        safe = key + "_" if key in _RESERVED else key
        extra[safe] = value
        names.append(safe)
    extra["stampede_fields"] = tuple(names)
    logger.log(level, "%s", _Message(name, fields), extra=extra)


def add_hook(hook: Hook) -> None:
    """Call `hook(name, value, labels)` for every event recorded from now on."""
    _hooks.append(hook)


def remove_hook(hook: Hook) -> None:
    """Stop calling `hook` (no error if it was not added)."""
    if hook in _hooks:
        _hooks.remove(hook)


def _emit(name: str, value: float, labels: Mapping[str, str]) -> None:
    for hook in _hooks[:]:  # a hook may remove itself
        try:
            hook(name, value, labels)
        except Exception:  # a metrics hook must never break a read or a write
            _log.debug("metrics hook %r raised", hook, exc_info=True)


def torn_read(reason: str) -> None:
    """A read found its group torn (`reason`: torn, uncommitted, unstamped, partial)."""
    _TORN.labels(reason=reason).inc()
    _emit("stampede_torn_reads", 1, {"reason": reason})


def read_retry() -> None:
    """A read re-read a group that looked in flight."""
    _RETRIES.inc()
    _emit("stampede_read_retries", 1, {})


def kept_read() -> None:
    """A read answered an in-flight group with the newest whole write its keys kept."""
    _KEPT.inc()
    _emit("stampede_kept_reads", 1, {})


def repair(action: str, source: str = "read") -> None:
    """A repair finished with `action` (a `RepairAction` value), run by `source`."""
    _REPAIRS.labels(action=action, source=source).inc()
    _emit("stampede_repairs", 1, {"action": action, "source": source})


def lost_race(source: str = "read") -> None:
    """A repair lost its compare-and-set to a newer write."""
    _LOST.labels(source=source).inc()
    _emit("stampede_lost_races", 1, {"source": source})


def lost_version() -> None:
    """read_atomic read a key as missing because its transaction's version was lost."""
    _LOST_VERSIONS.inc()
    _emit("stampede_lost_versions", 1, {})


def write_latency(seconds: float, outcome: str = "ok") -> None:
    """A stamped write took `seconds` (`outcome`: ok, partial, error)."""
    child = _WRITE_CHILDREN.get(outcome)
    if child is None:
        child = _WRITE_CHILDREN[outcome] = _WRITES.labels(outcome=outcome)
    child.observe(seconds)
    if _hooks:
        _emit("stampede_write_seconds", seconds, {"outcome": outcome})


_WRITE_CHILDREN: dict[str, Any] = {}
"""`_WRITES` by outcome: `labels()` looked up once per outcome, not per write."""


def worker_retry() -> None:
    """The worker put a failed job back with a backoff delay."""
    _WORKER_RETRIES.inc()
    _emit("stampede_worker_retries", 1, {})


class _Bridge(Collector):
    """Exposes one registry's metrics through another."""

    def __init__(self, source: CollectorRegistry) -> None:
        self.source = source

    def collect(self) -> Iterable[Metric]:
        return self.source.collect()

    def describe(self) -> Iterable[Metric]:
        return self.source.collect()


_mounted: dict[int, _Bridge] = {}


def mount(registry: CollectorRegistry = DEFAULT_REGISTRY) -> None:
    """Expose stampede's metrics through `registry` too (prometheus_client's default one
    unless told otherwise), so an existing `/metrics` endpoint serves them. Idempotent."""
    if id(registry) in _mounted:
        return
    bridge = _Bridge(REGISTRY)
    registry.register(bridge)
    _mounted[id(registry)] = bridge


def unmount(registry: CollectorRegistry = DEFAULT_REGISTRY) -> None:
    """Undo `mount(registry)`."""
    bridge = _mounted.pop(id(registry), None)
    if bridge is not None:
        registry.unregister(bridge)
