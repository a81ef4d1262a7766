"""Options, as pydantic models: set defaults on `connect`, override them per call.

```python
stampede.connect(urls, options=stampede.Options(mode="commit", ttl=3600))
await st.read(group, keys, retry=stampede.RetryPolicy(attempts=3))
```
"""

from __future__ import annotations

import math
import random
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ._backoff import backoff
from .errors import ConfigurationError
from .typing import RepairStrategy, VersionSource
from .verdict import Mode
from .versions import Counter, HybridClock
from .wire._record import MAX_SECONDS

__all__ = [
    "ConnectOptions",
    "Durability",
    "Options",
    "RetryPolicy",
    "check_count",
    "check_durability",
    "check_seconds",
    "check_strategy",
    "load_options",
    "strategy_problem",
]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    def __init__(self, **data: Any) -> None:
        """Validated; `ConfigurationError` naming each bad field (not pydantic's error)."""
        try:
            super().__init__(**data)
        except ValidationError as exc:
            problems = _problems(exc)
            known = f" (known fields: {', '.join(type(self).model_fields)})"
            extra = "Extra inputs are not permitted" in problems
            message = f"invalid {type(self).__name__}: {problems}{known if extra else ''}"
            raise _Refused(message, problems) from None


class _Refused(ConfigurationError):
    """A model's refusal; `problems` without the model's name, for an enclosing one."""

    def __init__(self, message: str, problems: str) -> None:
        super().__init__(message)
        self.problems = problems


class RetryPolicy(_Frozen):
    """How a read waits out a write in flight: exponential backoff with full jitter.

    A read is tried at most `attempts` times and gives up once `deadline` seconds
    have passed since it started; the sleep before attempt n+1 is uniform in
    `[0, min(max_delay, base_delay * 2**n)]`. Every number of seconds is finite
    (`deadline=None`, not infinity, reads without a deadline).
    """

    attempts: int = Field(default=8, ge=1, le=1000)
    base_delay: float = Field(default=0.002, gt=0, allow_inf_nan=False)
    max_delay: float = Field(default=0.1, gt=0, allow_inf_nan=False)
    deadline: float | None = Field(default=1.0, gt=0, allow_inf_nan=False)

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """The full-jitter sleep after failed attempt number `attempt` (0-based)."""
        return backoff(attempt, self.base_delay, self.max_delay, rng=rng)


class ConnectOptions(_Frozen):
    """How stampede talks to each Redis server.

    Retries follow one policy (see docs/retries.md): a failed connection attempt
    (nothing sent yet), or an idempotent command (a read, a stamp-guarded write)
    whose connection died before its reply, is tried again up to
    `connection_retries` times, sleeping a full-jitter backoff between `retry_base`
    and `retry_cap` seconds. A non-idempotent command is never sent again once it
    may have reached the server (`OutcomeUnknownError`, or the exactly-once fence
    of a transaction), and a timeout is never retried.
    """

    socket_timeout: float = Field(
        default=2.0,
        gt=0,
        allow_inf_nan=False,
        description="seconds to wait for a reply; never retried",
    )
    connect_timeout: float = Field(
        default=1.0, gt=0, allow_inf_nan=False, description="seconds to connect"
    )
    connection_retries: int = Field(
        default=3,
        ge=0,
        le=100,
        description="retries of a failed connection attempt or of an idempotent command "
        "whose connection died; never of a non-idempotent one",
    )
    retry_base: float = Field(
        default=0.01, gt=0, allow_inf_nan=False, description="seconds; backoff base"
    )
    retry_cap: float = Field(
        default=0.5, gt=0, allow_inf_nan=False, description="seconds; longest backoff sleep"
    )
    max_connections: int = Field(
        default=1024,
        ge=1,
        description="most connections open to each shard (each cluster node) at once; "
        "callers beyond wait for a free one (pipelines share at most 8 of them; the rest "
        "serve sessions: WATCH/MULTI, WAIT)",
    )
    coalesce: bool = Field(
        default=True,
        description="gather the requests of one loop turn into one round trip per shard",
    )
    batch_keys: int = Field(default=1024, ge=1, description="most keys in one coalesced batch")
    failover_timeout: float = Field(
        default=5.0,
        ge=0,
        allow_inf_nan=False,
        description="seconds a command that is safe to resend (a read, a stamp-guarded "
        "write) keeps trying while a cluster node fails over: the slot map is reloaded "
        "and the command sent to the slot's new owner, with backoff (over Sentinel: to "
        "the promoted replica); open() of a cluster or over Sentinel waits as long for "
        "a primary; 0 turns it off",
    )
    refresh_interval: float = Field(
        default=10.0,
        ge=0,
        allow_inf_nan=False,
        description="seconds between background reloads of a cluster's slot map (besides "
        "the reloads that MOVED, failed nodes and transient states trigger); 0 turns it off",
    )
    check_identity: bool = Field(
        default=True,
        description="on open(), check (and on first use write) each primary's shard identity "
        "record, so URLs in another order or number than the data was written with are "
        "refused; turn off only to re-shard (docs/operations.md)",
    )


class Durability(_Frozen):
    """Wait, after each guarded write, until replicas have it (`WAIT`), and with `aof`
    until it is fsynced to the append-only file locally and on those replicas
    (`WAITAOF`, Redis 7.2 and later, Valkey). Sent on the write's own connection,
    pipelined with it; the receipt says what each shard acknowledged."""

    replicas: int = Field(default=1, ge=0, le=64, description="replicas that must have it")
    timeout: float = Field(
        default=1.0,
        gt=0,
        allow_inf_nan=False,
        description="seconds to wait for them before reporting a shortfall",
    )
    aof: bool = Field(default=False, description="also wait for the AOF fsync (WAITAOF)")


class Options(_Frozen):
    """Defaults for every `write` and `read` of one `Stampede`."""

    mode: Mode = Mode.STAMP
    versions: Literal["hybrid", "counter"] | VersionSource = "hybrid"
    retry: RetryPolicy = RetryPolicy()
    # (the bounds of `wire.expire_at`, checked here so that a bad value is refused at
    # connect() naming its option, not at every write, or deep inside, later)
    ttl: float | None = Field(
        default=None,
        ge=0.001,
        lt=MAX_SECONDS,
        description="seconds; data and record expire together",
    )
    tombstone_grace: float = Field(
        default=300.0,
        ge=0.001,
        lt=MAX_SECONDS,
        description="seconds a delete's tombstones keep late older writes out",
    )
    version_grace: float = Field(
        default=5.0,
        gt=0,
        lt=MAX_SECONDS,
        description="seconds a transaction keeps a replaced version for slow readers",
    )
    transaction_timeout: float = Field(
        default=10.0,
        gt=0,
        allow_inf_nan=False,  # (a commit resends to a shard that failed until then)
        description="seconds a transaction may take to prepare before it aborts",
    )
    durability: Durability | None = Field(
        default=None, description="wait for replicas after every group write (docs: Failover)"
    )
    repair: Any = Field(default=None, description="a RepairStrategy, or None")
    connection: ConnectOptions = ConnectOptions()

    @model_validator(mode="after")
    def _check_versions(self) -> Options:
        if isinstance(self.versions, type) or not isinstance(self.versions, str | VersionSource):
            raise ValueError(_versions_problem(self.versions))
        if self.repair is not None:
            problem = strategy_problem(self.repair)
            if problem is not None:
                raise ValueError(problem)
        return self

    def version_source(self) -> VersionSource:
        """The `VersionSource` the `versions` option names (a fresh one for a name)."""
        return resolve_versions(self.versions)


def _versions_problem(spec: object) -> str:
    if isinstance(spec, type):
        return (
            f"versions must be 'hybrid', 'counter' or a VersionSource instance, got the class "
            f"{spec.__name__}; pass an instance: versions={spec.__name__}()"
        )
    return (
        "versions must be 'hybrid', 'counter' or a VersionSource instance (HybridClock(), "
        f"Counter()), got a {type(spec).__name__}"
    )


def resolve_versions(spec: str | VersionSource) -> VersionSource:
    if isinstance(spec, str):
        if spec == "hybrid":
            return HybridClock()
        if spec == "counter":
            return Counter()
        raise ConfigurationError(f"versions must be 'hybrid' or 'counter', got {spec!r}")
    if isinstance(spec, type) or not isinstance(spec, VersionSource):
        raise ConfigurationError(_versions_problem(spec))
    return spec


def strategy_problem(strategy: object) -> str | None:
    """What is wrong with `strategy` as a repair strategy, or None when it is one."""
    if isinstance(strategy, type):
        return (
            f"repair must be a RepairStrategy instance, got the class {strategy.__name__}; "
            f"pass an instance of it, e.g. repair={strategy.__name__}(...): NewestWins(), "
            "Refetch(loader), Enqueue(queue)"
        )
    if not isinstance(strategy, RepairStrategy):
        return (
            "repair must be a RepairStrategy (NewestWins(), Refetch(loader), "
            f"Enqueue(queue)), got {type(strategy).__name__}"
        )
    return None


def check_strategy(strategy: object, what: str = "repair") -> None:
    """`ConfigurationError` unless `strategy` is a repair strategy instance."""
    problem = strategy_problem(strategy)
    if problem is not None:
        raise ConfigurationError(problem.replace("repair must", f"{what} must", 1))


def load_options(options: Options | None, overrides: dict[str, Any]) -> Options:
    """`options` with `overrides` applied and validated; one `ConfigurationError` if bad."""
    try:
        data = {} if options is None else dict(options)
        overrides = dict(overrides)
        # The connection's own fields may be given flat (connect(urls, socket_timeout=1)).
        flat = {k: overrides.pop(k) for k in list(overrides) if k in ConnectOptions.model_fields}
        data.update(overrides)
        if flat:
            base = data.get("connection", ConnectOptions())
            current = dict(base) if isinstance(base, ConnectOptions) else dict(base or {})
            data["connection"] = {**current, **flat}
        return Options.model_validate(data)
    except ValidationError as exc:
        problems = _problems(exc)
        known = sorted({*Options.model_fields, *ConnectOptions.model_fields})
        if "Extra inputs are not permitted" in problems:
            problems += f" (known options: {', '.join(known)})"
        raise ConfigurationError(f"invalid stampede options: {problems}") from None


def _problems(exc: ValidationError) -> str:
    """Each error as `field: message` (a validator's own message without pydantic's
    "Value error, " in front of it)."""
    out = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"])
        inner = err.get("ctx", {}).get("error")
        if isinstance(inner, _Refused):  # a nested model's (or this one's own __init__)
            out.append(f"{where}: {inner.problems}" if where else inner.problems)
        else:
            out.append(f"{where or 'options'}: " + err["msg"].removeprefix("Value error, "))
    return "; ".join(out)


def check_durability(durability: object) -> Durability | None:
    """`durability` when it is a `Durability` or None; `ConfigurationError` otherwise."""
    if durability is None or isinstance(durability, Durability):
        return durability
    raise ConfigurationError(
        "durability must be a stampede.Durability, e.g. Durability(replicas=1), or None, "
        f"got a value of type {type(durability).__name__}"
    )


def check_count(value: object, what: str, low: int = 1, high: int | None = None) -> int:
    """`value` when it is an int (not a bool) in `low..high`; `ConfigurationError`
    naming `what` (e.g. "update()'s max_attempts") otherwise."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value >= low and (high is None or value <= high):
            return value
    span = f"at least {low}" if high is None else f"in {low}..{high}"
    raise ConfigurationError(f"{what} must be a whole number {span}, got {value!r}")


def check_seconds(value: object, what: str, *, zero: bool = True) -> float:
    """`value` when it is a finite number of seconds, not negative (nor 0 unless
    `zero`); `ConfigurationError` naming `what` otherwise (a NaN passes every `<`)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        if math.isfinite(value) and (value > 0 or (zero and value == 0)):
            return float(value)
    least = "0 or more" if zero else "more than 0"
    raise ConfigurationError(f"{what} must be a finite number of seconds, {least}, got {value!r}")
