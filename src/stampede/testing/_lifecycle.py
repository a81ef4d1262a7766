"""What the harness's servers, clusters and proxies have in common.

- `Started`: `with thing:` starts it, and stops it on the way out (also when starting
  failed half-way, so no process or port is left behind);
- `Addressed`: `address` (`host:port`) and `url` (`redis://host:port`) of something
  that listens on `host` and `port`.
"""

from __future__ import annotations

from typing import Any, Protocol, Self

__all__ = ["Addressed", "Started"]


class Started:
    """`with` starts it and stops it; subclasses define `start()` and `stop()`."""

    def start(self) -> Any:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


class _Listening(Protocol):
    @property
    def host(self) -> str: ...

    @property
    def port(self) -> int: ...


class Addressed:
    """`address` and `url` from the `host` and `port` a subclass has."""

    @property
    def address(self: _Listening) -> str:
        """`host:port`, as Redis Cluster writes node addresses."""
        return f"{self.host}:{self.port}"

    @property
    def url(self: _Listening) -> str:
        """`redis://host:port`."""
        return f"redis://{self.host}:{self.port}"
