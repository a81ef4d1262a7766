"""Redis URLs: what `stampede.connect` and the topologies accept, parsed into an `Endpoint`.

```
redis://[[user]:password@]host[:port][/db][?option=value&...]
rediss://...          the same over TLS
unix://[[user]:password@]/path/to/socket[?db=n&...]
```

Options: `db`, `client_name`, and for TLS `ssl_cert_reqs` (`required`, the
default, `optional` or `none`), `ssl_ca_certs`, `ssl_certfile`, `ssl_keyfile`,
`ssl_check_hostname` (`true`/`false`). User and password are URL-decoded.
Timeouts come from `ConnectOptions`.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from urllib.parse import parse_qsl, unquote, urlsplit

from ..errors import ConfigurationError
from ..options import ConnectOptions

__all__ = ["Endpoint", "node_url", "parse_url"]

_SCHEMES = ("redis", "rediss", "unix")
_OPTIONS = frozenset(
    "db client_name ssl_cert_reqs ssl_ca_certs ssl_certfile ssl_keyfile ssl_check_hostname".split()
)
_CERT_REQS = {"required": ssl.CERT_REQUIRED, "optional": ssl.CERT_OPTIONAL, "none": ssl.CERT_NONE}


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where and how to connect to one server."""

    host: str = "localhost"
    port: int = 6379
    path: str | None = None
    username: str | None = None
    password: str | None = None
    db: int = 0
    tls: ssl.SSLContext | None = None
    client_name: str | None = None
    connect_timeout: float = 5.0
    socket_timeout: float = 5.0

    @property
    def name(self) -> str:
        """`host:port` (or the socket path): how errors and metrics name the server."""
        return self.path if self.path is not None else f"{self.host}:{self.port}"

    def at(self, host: str, port: int) -> Endpoint:
        """The same settings for another node (cluster nodes share credentials and TLS)."""
        return Endpoint(
            host,
            port,
            None,
            self.username,
            self.password,
            self.db,
            self.tls,
            self.client_name,
            self.connect_timeout,
            self.socket_timeout,
        )


def parse_url(url: str, options: ConnectOptions | None = None) -> Endpoint:
    """The `Endpoint` of `url`; `ConfigurationError` naming what is wrong."""
    opts = options or ConnectOptions()
    if not isinstance(url, str) or "://" not in url:
        raise ConfigurationError(f"{url!r} is not a Redis URL; write redis://host:port")
    try:
        url.encode()
        parts = urlsplit(url)
    except UnicodeEncodeError:  # bytes a shell passed that are not UTF-8
        raise ConfigurationError("bad Redis URL: it is not UTF-8 text; write it in UTF-8") from None
    except ValueError as exc:  # "Invalid IPv6 URL": a bracket left open
        raise ConfigurationError(f"bad Redis URL: {exc}") from None
    if parts.scheme not in _SCHEMES:
        raise ConfigurationError(
            f"bad Redis URL: scheme {parts.scheme!r} is not one of {', '.join(_SCHEMES)}"
        )
    query = dict(parse_qsl(parts.query))
    unknown = sorted(set(query) - _OPTIONS)
    if unknown:
        raise ConfigurationError(
            f"bad Redis URL: unknown option(s) {', '.join(unknown)}; known: "
            f"{', '.join(sorted(_OPTIONS))}"
        )
    name = query.get("client_name")
    if name is not None and any(not "!" <= c <= "~" for c in name):
        raise ConfigurationError(
            f"bad Redis URL: client_name {name!r} may hold only printable ASCII, without "
            "spaces (Redis refuses any other name)"
        )
    db = _db(parts.path if parts.scheme != "unix" else "", query.get("db"))
    username = unquote(parts.username) if parts.username else None
    password = unquote(parts.password) if parts.password is not None else None
    common = {
        "username": username,
        "password": password,
        "db": db,
        "client_name": name,
        "connect_timeout": opts.connect_timeout,
        "socket_timeout": opts.socket_timeout,
    }
    if parts.scheme == "unix":
        if not parts.path:
            raise ConfigurationError("bad Redis URL: unix:// needs the socket's path")
        return Endpoint(path=parts.path, **common)  # type: ignore[arg-type]
    try:
        port = parts.port or 6379
    except ValueError as exc:
        raise ConfigurationError(f"bad Redis URL: {exc}") from None
    tls = _tls(query) if parts.scheme == "rediss" else None
    return Endpoint(parts.hostname or "localhost", port, tls=tls, **common)  # type: ignore[arg-type]


def node_url(url: str, name: str) -> str:
    """A URL for the node `name` (`host:port`), in `url`'s scheme and credentials."""
    if "://" not in url:
        return f"redis://{name}"
    scheme, rest = url.split("://", 1)
    authority = rest.split("/", 1)[0]
    user = authority.rsplit("@", 1)[0] + "@" if "@" in authority else ""
    return f"{scheme}://{user}{name}"


def _db(path: str, given: str | None) -> int:
    text = given if given is not None else path.strip("/")
    if not text:
        return 0
    if not text.isdigit():
        raise ConfigurationError(f"bad Redis URL: the database must be a number, got {text!r}")
    return int(text)


def _tls(query: dict[str, str]) -> ssl.SSLContext:
    reqs = query.get("ssl_cert_reqs", "required").lower()
    if reqs not in _CERT_REQS:
        raise ConfigurationError(
            f"bad Redis URL: ssl_cert_reqs must be required, optional or none, got {reqs!r}"
        )
    try:
        context = ssl.create_default_context(cafile=query.get("ssl_ca_certs"))
    except OSError as exc:  # ssl.SSLError too: a missing file, or not a certificate
        raise _unloadable("the CA file", f"ssl_ca_certs={query['ssl_ca_certs']!r}", exc) from None
    check = query.get("ssl_check_hostname", "true" if reqs == "required" else "false")
    context.check_hostname = check.lower() in ("1", "true", "yes")
    context.verify_mode = _CERT_REQS[reqs]
    if "ssl_certfile" in query:
        try:
            context.load_cert_chain(query["ssl_certfile"], query.get("ssl_keyfile"))
        except OSError as exc:
            named = [name for name in ("ssl_certfile", "ssl_keyfile") if name in query]
            files = ", ".join(f"{name}={query[name]!r}" for name in named)
            raise _unloadable("the client certificate", files, exc) from None
    return context


def _unloadable(what: str, where: str, exc: OSError) -> ConfigurationError:
    why = exc.strerror or str(exc)
    return ConfigurationError(
        f"bad Redis URL: cannot load {what} {where} ({why}); give a readable PEM file"
    )
