"""Fixtures: one server for the session (tests use distinct queue names), fresh ones on request."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest
import redis
from servers import Cluster, Server

import vtrr


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    started = Server(("reclaim-interval-ms", "50"))
    yield started
    started.stop()


@pytest.fixture
def make_server() -> Iterator[Callable[..., Server]]:
    """Starts servers with their own module arguments; stops them after the test."""
    started: list[Server] = []

    def make(*module_args: str, extra: tuple[str, ...] = (), with_module: bool = True) -> Server:
        started.append(Server(module_args, extra, with_module=with_module))
        return started[-1]

    yield make
    for each in started:
        each.stop()


@pytest.fixture
def client(server: Server) -> Iterator[redis.Redis]:
    con = server.client()
    yield con
    con.close()


@pytest.fixture
def queue_name() -> str:
    """A name no other test uses, with a hash tag (as a cluster needs)."""
    return "{t" + uuid.uuid4().hex[:12] + "}"


@pytest.fixture
def queue(client: redis.Redis, queue_name: str) -> vtrr.Queue:
    return vtrr.Queue(client, queue_name)


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    started = Cluster(3, ("reclaim-interval-ms", "50"))
    yield started
    started.stop()
