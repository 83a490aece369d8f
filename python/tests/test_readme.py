"""python/README.md's client snippet does what its comments say, against a real server."""

from __future__ import annotations

import re
from pathlib import Path

import redis
from servers import Server

import vtrr

README = Path(__file__).parent.parent / "README.md"


def first_python_block() -> str:
    text = README.read_text()
    return re.search(r"```python\n(.*?)```", text, re.DOTALL).group(1)  # type: ignore[union-attr]


def test_the_client_snippet_does_what_its_comments_say(server: Server) -> None:
    snippet = first_python_block()
    assert 'vtrr.Queue(redis.Redis(), "files")' in snippet
    client = server.client()
    client.delete(*client.keys("vtrr:files*") or ["-"])  # either layout
    # The snippet's default client, pointed at this test's server.
    code = snippet.replace("redis.Redis()", f"redis.Redis(port={server.port})")
    scope: dict[str, object] = {}
    exec(compile(code, str(README), "exec"), scope)
    got = scope["got"]
    assert isinstance(got, vtrr.AckedLeases)
    assert got.acked == (True,)
    assert [lease.id for lease in got.leases] == ["job-1", "job-2", "job-3"]
    queue = scope["queue"]
    assert isinstance(queue, vtrr.Queue)
    stats = queue.stats()
    assert (stats.queued, stats.inflight, stats.delayed) == (1, 1, 2)
    bob = queue.partition("bob")
    assert (bob.queued, bob.leased, bob.delayed) == (1, 1, 0)
    assert isinstance(queue.client, redis.Redis)
