"""The stamp a repair writes under: ordered after every stamp the read saw (or the
source of truth's own version), and never one from a clock far ahead."""

from __future__ import annotations

import time

from ..errors import RepairError
from ..typing import RepairContext
from ..verdict import Observation
from ..versions import DEFAULT_MAX_OFFSET, HybridClock
from ..wire import CLOCK_FLOOR, MAX_VERSION, kind_of, new_token, token_after

__all__ = ["orders_after", "refuse_far_ahead", "repair_stamp"]


def _stamps(obs: Observation) -> list[tuple[int, str]]:
    stamps = [(e.version, e.token) for e in obs.envelopes if e is not None]
    record = obs.commit()
    if record is not None:
        stamps.append((record.version, record.token))
    return stamps


def orders_after(obs: Observation, source_version: int | None) -> bool:
    """Is `source_version` (a loader's) newer than every stamp `obs` saw, and of their
    kind? (A stamp of version 0, a repair of a group that had none, orders before all.)"""
    stamps = _stamps(obs)
    newest = max(stamps)[0] if stamps else 0
    if source_version is None:
        return False
    if not newest:
        return True
    return kind_of(newest) is kind_of(source_version) and source_version > newest


def repair_stamp(obs: Observation, source_version: int | None = None) -> tuple[int, str]:
    """The repair's own stamp, ordered after every stamp `obs` saw.

    Without a source version: the newest seen version and a fresh token after
    its token ((0, a new token) when nothing was stamped). With one (the
    database's row version, say): that version, which must not be older than the
    newest seen, nor of the other version kind.
    """
    stamps = _stamps(obs)
    newest = max(stamps) if stamps else None
    if source_version is None:
        return (0, new_token()) if newest is None else _after(obs, newest)
    group = obs.group.decode("utf-8", "backslashreplace")
    if newest is None:
        return source_version, new_token()
    if newest[0] and kind_of(newest[0]) is not kind_of(source_version):
        raise RepairError(
            group,
            f"the loader gave version {source_version}, which cannot be ordered against the "
            f"stored version {newest[0]} (one is a clock version, the other a sequence "
            "version); write the group with the source's versions too (write(version=...))",
        )
    if source_version < newest[0]:
        raise RepairError(
            group,
            f"the loader gave version {source_version}, older than version {newest[0]} "
            "already stored; it may read a lagging replica. Nothing was written",
        )
    if source_version == newest[0]:
        return _after(obs, newest)
    return source_version, new_token()


def _after(obs: Observation, stamp: tuple[int, str]) -> tuple[int, str]:
    """A stamp just after `stamp`: same version, a later token; the next version when
    the token is the largest ULID (a value another program wrote)."""
    try:
        return stamp[0], token_after(stamp[1])
    except ValueError:
        version = stamp[0] + 1
        if version <= MAX_VERSION and (stamp[0] == 0 or kind_of(version) is kind_of(stamp[0])):
            return version, new_token()
    raise RepairError(
        obs.group,
        "the newest stored stamp is the largest that can exist (another program wrote it); "
        "delete the group's keys",
    )


def refuse_far_ahead(ctx: RepairContext, obs: Observation, version: int) -> None:
    """A repair stamped after a clock version further ahead of this clock than
    `max_offset` would carry that version to every key of the group, and each key
    would then refuse every honest write (`ClockSkewError`) where one did. A write
    over such a version is refused; so is a repair, before it writes anything."""
    if version < CLOCK_FLOOR:
        return  # a sequence version says nothing about time
    clock = ctx.versions
    if isinstance(clock, HybridClock):
        now, offset = clock.physical(), clock.max_offset
    else:
        now, offset = time.time_ns(), DEFAULT_MAX_OFFSET
    if version > now + int(offset * 1e9):
        raise RepairError(
            obs.group,
            f"the newest stored stamp is {(version - now) / 1e9:.0f} s ahead of this clock "
            f"(more than max_offset, {offset:g} s): a writer's clock runs ahead, or another "
            "program stamped it, and a repair would carry it to every key. Fix the clock, "
            "then delete the group's keys or wait",
        )
