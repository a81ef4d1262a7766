"""Free TCP ports for test servers, robust to other test runs on the same machine.

A port that looks free may be taken by someone else before redis-server binds it;
callers therefore retry with another port when the server reports "Address already
in use". Inside this process, ports handed out stay reserved until released, so a
killed node can be restarted on its port without another node grabbing it.
"""

from __future__ import annotations

import socket
import threading

CLUSTER_BUS_OFFSET = 10000
_MAX_PORT = 65535

_reserved: set[int] = set()
_lock = threading.Lock()


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def _bindable(host: str, port: int) -> bool:
    with socket.socket(_family(host), socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _kernel_port(host: str) -> int:
    with socket.socket(_family(host), socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
    return port


def reserve_free_port(host: str, *, cluster: bool = False) -> int:
    """Pick a port that is free now (and its bus port, for a cluster node) and reserve it."""
    for _ in range(500):
        port = _kernel_port(host)
        if cluster:
            bus = port + CLUSTER_BUS_OFFSET
            if bus > _MAX_PORT or not _bindable(host, bus):
                continue
        wanted = _ports_of(port, cluster=cluster)
        with _lock:
            if _reserved.isdisjoint(wanted):
                _reserved.update(wanted)
                return port
    raise OSError(f"found no free TCP port on {host} after 500 tries")


def _ports_of(port: int, *, cluster: bool) -> set[int]:
    return {port, port + CLUSTER_BUS_OFFSET} if cluster else {port}


def reserve_port(port: int, *, cluster: bool = False) -> None:
    """Reserve a port the caller chose itself (idempotent)."""
    with _lock:
        _reserved.update(_ports_of(port, cluster=cluster))


def release_port(port: int, *, cluster: bool = False) -> None:
    """Give a reserved port (and its bus port, for a cluster node) back (idempotent)."""
    with _lock:
        _reserved.difference_update(_ports_of(port, cluster=cluster))
