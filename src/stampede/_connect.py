"""stampede.connect: a Stampede over the servers at some URLs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._client import Stampede, kind_name
from .errors import (
    ConfigurationError,
)
from .keys import HashPolicy, SlotMap
from .options import Options, load_options
from .topology._checks import redact
from .topology._cluster import Cluster
from .topology._sentinel import SentinelShards
from .topology._shards import Shards
from .typing import Topology

__all__ = ["connect"]


def connect(
    urls: str | Sequence[str] | None = None,
    *,
    cluster: bool = False,
    sentinels: Sequence[str] | None = None,
    services: Sequence[str] | None = None,
    options: Options | None = None,
    slot_map: SlotMap | None = None,
    hash_pattern: str | None = None,
    data_url: str | None = None,
    **overrides: Any,
) -> Stampede:
    """A `Stampede` over independent primaries (a list of URLs) or a cluster.

    `cluster=True` takes one or more startup node URLs (any node of the cluster;
    several, so that `open()` and slot map reloads survive one being down).
    `sentinels=[...]` and `services=[...]` (instead of URLs): primaries that Redis
    Sentinel manages, one Sentinel master name per shard, in shard order. The data
    nodes take the first Sentinel URL's credentials and TLS settings, or, when the
    Sentinels' differ from theirs, `data_url`'s: a URL without a host
    (`"redis://user:password@"`, `"rediss://..."` for TLS); the Sentinels name the hosts.
    Keyword options (`mode`, `versions`, `retry`, `ttl`, `repair`, `connection`)
    override the fields of `options`.
    Nothing is sent until the first call (or `open()`).
    """
    opts = load_options(options, overrides)
    if sentinels is not None or services is not None:
        if urls is not None or cluster:
            raise ConfigurationError(
                "give either URLs (or cluster=True) or sentinels= and services=, not both"
            )
        if not sentinels or not services:
            raise ConfigurationError(
                "Sentinel needs both sentinels=['redis://h1:26379', ...] and "
                "services=['shard-a', ...] (one master name per shard, in shard order)"
            )
        policy = HashPolicy(hash_pattern) if hash_pattern is not None else None
        shards = SentinelShards(
            sentinels,
            services,
            options=opts.connection,
            slot_map=slot_map,
            policy=policy,
            data_url=data_url,
        )
        return Stampede(shards, options=opts)
    if data_url is not None:
        raise ConfigurationError(
            "data_url gives the credentials of Sentinel-managed data nodes (with sentinels= "
            "and services=); with URLs, put the credentials in each URL"
        )
    urls = _checked(urls)
    if cluster:
        if slot_map is not None or hash_pattern is not None:
            raise ConfigurationError(
                "slot_map and hash_pattern apply to client-side sharding, not a cluster"
            )
        topology: Topology = Cluster(urls, options=opts.connection)
    else:
        policy = HashPolicy(hash_pattern) if hash_pattern is not None else None
        topology = Shards(urls, options=opts.connection, slot_map=slot_map, policy=policy)
    return Stampede(topology, options=opts)


def _checked(urls: str | Sequence[str] | None) -> list[str]:
    """`urls` as a list of Redis URLs; `ConfigurationError` saying what to give."""
    if urls is None:
        raise ConfigurationError(
            "connect() needs Redis URLs (one per primary, or cluster nodes with "
            "cluster=True), or sentinels= and services="
        )
    if isinstance(urls, str):
        urls = [urls]
    if not isinstance(urls, list | tuple):
        raise ConfigurationError(
            f"connect() takes a URL or a list of URLs, got {kind_name(urls)}; e.g. "
            "connect(['redis://a:6379', 'redis://b:6379'])"
        )
    urls = list(urls)
    if not urls:
        raise ConfigurationError("connect() needs at least one Redis URL")
    for url in urls:
        if not isinstance(url, str) or "://" not in url:
            shown = redact(url) if isinstance(url, str) else kind_name(url)
            raise ConfigurationError(
                f"{shown} is not a Redis URL; write redis://host:port (rediss:// for TLS, "
                "redis://user:password@host:port with credentials)"
            )
    return urls
