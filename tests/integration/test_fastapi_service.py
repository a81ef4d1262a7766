"""examples/fastapi_service.py: the users service over real primaries and a real cluster."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

from stampede.testing import LocalPrimaries

PATH = Path(__file__).resolve().parents[2] / "examples" / "fastapi_service.py"
ADA: dict[str, Any] = {"profile": {"name": "Ada", "email": "ada@example.org"}}


def load() -> ModuleType:
    """Import the example from its file (examples/ is not a package)."""
    spec = importlib.util.spec_from_file_location("fastapi_service", PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # pydantic resolves the models' annotations through it
    spec.loader.exec_module(module)
    return module


SERVICE = load()


async def serve(urls: list[str], cluster: bool) -> AsyncIterator[tuple[httpx.AsyncClient, Any]]:
    """The app with its lifespan running, and an in-process HTTP client to it."""
    app = SERVICE.create_app(urls, cluster=cluster)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://users") as http:
            yield http, app


@pytest.fixture
async def service(topology_env: tuple[str, Any]) -> AsyncIterator[tuple[httpx.AsyncClient, Any]]:
    """(client, app) over three primaries, then over a three-master cluster."""
    kind, env = topology_env
    urls = [env.url] if kind == "cluster" else list(env.urls)
    async for pair in serve(urls, kind == "cluster"):
        yield pair


async def test_create_read_update(service: tuple[httpx.AsyncClient, Any]) -> None:
    """POST creates (201), GET reads it whole with its version, PUT replaces both parts."""
    http, _ = service
    created = await http.post("/users/1", json=ADA)
    assert created.status_code == 201, created.text
    got = await http.get("/users/1")
    assert got.status_code == 200 and got.headers["X-Stampede-Consistent"] == "true"
    assert got.json()["profile"] == ADA["profile"] and got.json()["settings"]["theme"] == "light"
    assert got.headers["X-Stampede-Version"] == created.headers["X-Stampede-Version"]
    replaced = await http.put("/users/1", json={**ADA, "settings": {"theme": "dark"}})
    assert replaced.status_code == 200
    again = (await http.get("/users/1")).json()
    assert again["settings"]["theme"] == "dark" and again["version"] > got.json()["version"]


async def test_torn_user_reads_as_queued_until_the_worker_repairs_it(
    service: tuple[httpx.AsyncClient, Any],
) -> None:
    """A torn user reads 200 marked stale with a queued repair; after the worker it is whole."""
    http, app = service
    assert (await http.post("/users/2", json=ADA)).status_code == 201
    await SERVICE.tear_profile(app.state.st, 2, "Ada Lovelace")
    stale = await http.get("/users/2")
    assert stale.status_code == 200
    assert stale.headers["X-Stampede-Consistent"] == "false"
    assert stale.headers["X-Stampede-Repair"] == "queued"
    assert stale.headers["Cache-Control"] == "no-store"
    body = stale.json()
    assert body["consistent"] is False and body["repair_queued"] is True
    assert body["version"] is None and body["profile"]["name"] == "Ada Lovelace"
    await SERVICE.drain(app.state.st)
    fixed = await http.get("/users/2")
    assert fixed.headers["X-Stampede-Consistent"] == "true"
    assert fixed.json()["profile"]["name"] == "Ada Lovelace"
    assert fixed.json()["consistent"] is True and fixed.json()["repair_queued"] is False


async def test_missing_duplicate_and_invalid(service: tuple[httpx.AsyncClient, Any]) -> None:
    """404 for an unknown user (GET and PUT), 409 for a second create, 422 for a bad body."""
    http, _ = service
    assert (await http.get("/users/3")).status_code == 404
    assert (await http.put("/users/3", json=ADA)).status_code == 404
    assert (await http.post("/users/3", json=ADA)).status_code == 201
    assert (await http.post("/users/3", json=ADA)).status_code == 409
    bad = {"profile": {"name": "", "email": "not-an-address"}}
    assert (await http.post("/users/4", json=bad)).status_code == 422


async def test_configured_from_environment(
    stampede_primaries: LocalPrimaries, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no arguments the app connects to STAMPEDE_URLS (comma-separated)."""
    monkeypatch.setenv("STAMPEDE_URLS", ",".join(stampede_primaries.urls))
    monkeypatch.setenv("STAMPEDE_CLUSTER", "0")
    app = SERVICE.create_app()
    async with app.router.lifespan_context(app):
        assert app.state.st.topology.shard_names == [n.address for n in stampede_primaries.nodes]
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://users") as http:
            assert (await http.post("/users/5", json=ADA)).status_code == 201


async def test_down_shard_answers_503(stampede_primaries: LocalPrimaries) -> None:
    """A primary that is down gives 503 with Retry-After instead of a server error."""
    async for http, app in serve(stampede_primaries.urls, False):
        assert (await http.post("/users/6", json=ADA)).status_code == 201
        profile = app.state.st.topology.shard_of(b"users:6:profile")
        node = next(n for n in stampede_primaries.nodes if n.address == profile)
        node.kill()  # the plugin restarts it before the next test
        down = await http.get("/users/6")
        assert down.status_code == 503 and down.headers["Retry-After"] == "1"
        assert profile in down.json()["detail"]
