"""A FastAPI service that keeps users (profile + settings) in Redis through stampede.

A user's profile and settings live under `users:<id>:profile` and
`users:<id>:settings`, keys without a common hash tag, so they land on different
shards and no transaction covers both. Every write stamps both; every read checks
the stamps. A read that finds the user torn (a writer died half-way) does not
wait for a repair: it answers at once with what it found, marked stale, and puts
a job on the repair stream for `stampede worker`.

    STAMPEDE_URLS=redis://a:6379,redis://b:6379 uvicorn fastapi_service:app
    STAMPEDE_URLS=redis://node:7000 STAMPEDE_CLUSTER=1 uvicorn fastapi_service:app
    stampede worker --url redis://a:6379 --url redis://b:6379 --strategy newest-wins

    python examples/fastapi_service.py [--url URL ...] [--cluster]   # self-check, no server

Routes:

    POST /users/{id}   body {"profile": {...}, "settings": {...}}   201, or 409 if it exists
    PUT  /users/{id}   the same body, replaces both parts          200, or 404
    GET  /users/{id}                                               200, or 404

A consistent read answers 200 with `"consistent": true` and the headers
`X-Stampede-Consistent: true` and `X-Stampede-Version`. A torn read also answers
200, with `"consistent": false`, `"repair_queued": true`, the parts as they are
now (one of them may be null), and the headers `X-Stampede-Consistent: false`,
`X-Stampede-Repair: queued` and `Cache-Control: no-store`: the data may be stale
and must not be cached; read again after the worker has run. A shard that does
not answer gives 503 with `Retry-After: 1`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, Literal

from fastapi import APIRouter, FastAPI, HTTPException, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

import stampede
from stampede import Envelope, RetryPolicy, ShardError, Stampede, TypedGroup, WriteError
from stampede.repair import Enqueue, NewestWins, RepairQueue, Worker
from stampede.testing import drop_kept
from stampede.wire import new_token

READ_RETRY = RetryPolicy(attempts=5, base_delay=0.002, max_delay=0.05, deadline=0.25)


class Profile(BaseModel):
    name: str = Field(min_length=1, max_length=200)
    email: str = Field(pattern=r"^[^@\s]+@[^@\s]+$")


class Settings(BaseModel):
    theme: Literal["light", "dark"] = "light"
    language: str = Field(default="en", min_length=2, max_length=16)


class UserIn(BaseModel):
    profile: Profile
    settings: Settings = Settings()


class UserOut(BaseModel):
    id: int
    profile: Profile | None
    settings: Settings | None
    consistent: bool
    repair_queued: bool = False
    version: int | None = None


PARTS: dict[str, type[BaseModel]] = {"profile": Profile, "settings": Settings}
USERS = TypedGroup(PARTS)


def group_of(user_id: int) -> str:
    return f"users:{user_id}"


def settings_from_env() -> tuple[list[str], bool]:
    """STAMPEDE_URLS (comma-separated) and STAMPEDE_CLUSTER (1/true/yes)."""
    urls = [u.strip() for u in os.environ.get("STAMPEDE_URLS", "").split(",") if u.strip()]
    cluster = os.environ.get("STAMPEDE_CLUSTER", "").lower() in ("1", "true", "yes")
    return urls or ["redis://localhost:6379"], cluster


async def shard_down(request: Request, exc: Exception) -> JSONResponse:
    """503 when a shard does not answer (ShardError)."""
    shard = getattr(exc, "shard", "?")
    return JSONResponse(
        {"detail": f"a Redis shard did not answer ({shard}); try again"},
        status_code=503,
        headers={"Retry-After": "1"},
    )


async def write_failed(request: Request, exc: Exception) -> JSONResponse:
    """503 when a write reached only some shards (WriteError).

    Readers see the user torn until the write is retried (safe: the guard makes it
    idempotent) or the group is repaired.
    """
    return JSONResponse(
        {"detail": "the write did not reach every shard; retry it"},
        status_code=503,
        headers={"Retry-After": "1"},
    )


router = APIRouter()


async def read_user(request: Request, user_id: int) -> UserOut | None:
    """The user as a read finds it (queued for repair when torn); None when absent."""
    got = await USERS.read(
        request.app.state.st, group_of(user_id), retry=READ_RETRY, repair=request.app.state.repair
    )
    if not got.result.found:
        return None
    profile, settings = got["profile"], got["settings"]
    assert profile is None or isinstance(profile, Profile)
    assert settings is None or isinstance(settings, Settings)
    return UserOut(
        id=user_id,
        profile=profile,
        settings=settings,
        consistent=got.consistent,
        repair_queued=got.result.queued,
        version=got.result.version,
    )


async def write_user(request: Request, user_id: int, body: UserIn, response: Response) -> UserOut:
    """Write both parts as one stamped write."""
    st: Stampede = request.app.state.st
    receipt = await USERS.write(st, group_of(user_id), profile=body.profile, settings=body.settings)
    response.headers["X-Stampede-Version"] = str(receipt.version)
    return UserOut(
        id=user_id,
        profile=body.profile,
        settings=body.settings,
        consistent=True,
        version=receipt.version,
    )


@router.post("/users/{user_id}", status_code=201)
async def create_user(user_id: int, body: UserIn, request: Request, response: Response) -> UserOut:
    # Not a uniqueness guarantee: two concurrent creates both pass this check.
    if await read_user(request, user_id) is not None:
        raise HTTPException(409, f"user {user_id} exists; PUT replaces it")
    return await write_user(request, user_id, body, response)


@router.put("/users/{user_id}")
async def replace_user(user_id: int, body: UserIn, request: Request, response: Response) -> UserOut:
    if await read_user(request, user_id) is None:
        raise HTTPException(404, f"no user {user_id}")
    return await write_user(request, user_id, body, response)


@router.get("/users/{user_id}")
async def get_user(user_id: int, request: Request, response: Response) -> UserOut:
    user = await read_user(request, user_id)
    if user is None:
        raise HTTPException(404, f"no user {user_id}")
    response.headers["X-Stampede-Consistent"] = "true" if user.consistent else "false"
    if user.consistent:
        response.headers["X-Stampede-Version"] = str(user.version)
    else:
        response.headers["Cache-Control"] = "no-store"
        if user.repair_queued:
            response.headers["X-Stampede-Repair"] = "queued"
    return user


def create_app(urls: Sequence[str] | None = None, *, cluster: bool | None = None) -> FastAPI:
    """The service; `urls`/`cluster` default to STAMPEDE_URLS / STAMPEDE_CLUSTER.

    The lifespan opens one `Stampede` for the process and closes it on shutdown;
    torn reads go to the repair stream (`Enqueue`) for `stampede worker`.
    """
    env_urls, env_cluster = settings_from_env()
    chosen = list(urls) if urls else env_urls
    on_cluster = env_cluster if cluster is None else cluster

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        st = stampede.connect(chosen, cluster=on_cluster)
        await st.open()
        app.state.st = st
        app.state.repair = Enqueue(RepairQueue(st.topology))
        try:
            yield
        finally:
            await st.aclose()

    app = FastAPI(title="users", lifespan=lifespan)
    app.include_router(router)
    app.add_exception_handler(ShardError, shard_down)
    app.add_exception_handler(WriteError, write_failed)
    return app


app = create_app()


# -- self-check: `python examples/fastapi_service.py` -------------------------------


async def tear_profile(st: Stampede, user_id: int, name: str) -> None:
    """Play a writer that died half-way, longer ago than the grace window: a newer
    profile reaches its shard, settings do not, and no whole write is kept."""
    key = f"users:{user_id}:profile".encode()
    stored = Envelope.decode(await st.topology.execute(key, "GET", key))
    version, token = stored.version + 1, new_token()
    body = Profile(name=name, email="ada@example.org").model_dump_json().encode()
    out = await st.topology.write_guarded(
        [key], [Envelope(version, token, body).encode()], version=version, token=token
    )
    assert out.ok
    await drop_kept(st.topology, [key])


async def drain(st: Stampede) -> None:
    """Run a repair worker (NewestWins) in-process until the repair stream is empty."""
    queue = RepairQueue(st.topology)
    worker = Worker(st.topology, queue, NewestWins(), poll_interval=0.01, block_ms=100)
    running = asyncio.create_task(worker.run())
    try:
        for _ in range(500):
            stats = await queue.stats()
            if stats["length"] == 0 and stats["pending"] == 0:
                return
            await asyncio.sleep(0.02)
        raise AssertionError(f"the repair stream did not drain: {stats}")
    finally:
        worker.stop()
        await running


async def main(urls: Sequence[str], *, cluster: bool = False) -> None:
    """Create, read, update; tear the user; read it as queued; repair; read it whole."""
    import httpx  # only the self-check needs an HTTP client

    service = create_app(urls, cluster=cluster)
    async with (
        service.router.lifespan_context(service),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=service), base_url="http://service"
        ) as http,
    ):
        st: Stampede = service.state.st
        await st.topology.execute(b"users:7:profile", "DEL", b"users:7:profile")
        await st.topology.execute(b"users:7:settings", "DEL", b"users:7:settings")
        body: dict[str, Any] = {"profile": {"name": "Ada", "email": "ada@example.org"}}
        created = await http.post("/users/7", json=body)
        assert created.status_code == 201, created.text
        assert (await http.post("/users/7", json=body)).status_code == 409
        body["settings"] = {"theme": "dark"}
        assert (await http.put("/users/7", json=body)).status_code == 200
        got = await http.get("/users/7")
        assert got.headers["X-Stampede-Consistent"] == "true", got.text
        print("read:", got.json())

        await tear_profile(st, 7, "Ada Lovelace")
        stale = await http.get("/users/7")
        assert stale.status_code == 200 and stale.headers["X-Stampede-Repair"] == "queued"
        print("torn read:", stale.json())

        await drain(st)
        fixed = await http.get("/users/7")
        assert fixed.headers["X-Stampede-Consistent"] == "true", fixed.text
        assert fixed.json()["profile"]["name"] == "Ada Lovelace"
        print("after the worker:", fixed.json())


def run() -> None:
    parser = argparse.ArgumentParser(description="Self-check of the users service.")
    parser.add_argument("--url", action="append", default=[], help="a Redis URL (repeat)")
    parser.add_argument("--cluster", action="store_true", help="the URL is a cluster node")
    args = parser.parse_args()
    try:
        if args.url:
            asyncio.run(main(args.url, cluster=args.cluster))
        else:
            from stampede.testing import LocalCluster, LocalPrimaries

            if args.cluster:
                with LocalCluster(3) as servers:
                    asyncio.run(main([servers.url], cluster=True))
            else:
                with LocalPrimaries(3) as primaries:
                    asyncio.run(main(primaries.urls))
    except Exception as exc:
        print(f"FAILED: {type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    run()
