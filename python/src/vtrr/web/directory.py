"""Which queues the web view shows: the ones it was given, or those found by SCAN.

Discovery walks the keyspace with `SCAN ... MATCH vtrr:* COUNT 1000` (never
KEYS, which blocks the server) for at most `_SCAN_CALLS` calls per node, and
keeps the result for `_KEEP_SECONDS`: pages share one scan however many are
open. A queue is named by any of its keys (`vtrr:<name>:<suffix>`), since in
the keys layout `vtrr:<name>:queue` is gone while nothing is queued.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Iterable, Sequence
from typing import Any, cast

import redis

from ..client import QUEUE_KEY_SUFFIXES
from ..types import decode, encode

_PREFIX = b"vtrr:"
# Every key of a queue is vtrr:<name>:<one of these>.
_SUFFIXES = frozenset(suffix.encode() for suffix in QUEUE_KEY_SUFFIXES)
_SCAN_COUNT = 1000
_SCAN_CALLS = 1000  # a million keys examined per node at most
_KEEP_SECONDS = 30.0


@dataclasses.dataclass(frozen=True, slots=True)
class Listing:
    names: tuple[str, ...]
    #: Discovery stopped before the end of the keyspace: some queues may be missing.
    partial: bool
    discovered: bool


def _queue_names(keys: Iterable[bytes]) -> set[str]:
    """The queue names some `vtrr:*` keys belong to."""
    names = set()
    for key in keys:
        name, _, suffix = key.removeprefix(_PREFIX).rpartition(b":")
        if key.startswith(_PREFIX) and name and suffix in _SUFFIXES:
            names.add(decode(name))
    return names


def _scan_node(client: Any) -> tuple[set[bytes], bool]:
    """The vtrr keys of one node, bounded; and whether the scan was cut short."""
    keys: set[bytes] = set()
    cursor = 0
    for _ in range(_SCAN_CALLS):
        cursor, batch = client.scan(cursor, match=_PREFIX + b"*", count=_SCAN_COUNT)
        keys.update(batch)
        if int(cursor) == 0:
            return keys, False
    return keys, True


def _scan(client: redis.Redis | redis.RedisCluster) -> tuple[set[str], bool]:
    if isinstance(client, redis.RedisCluster):
        cluster = cast(Any, client)  # redis-py's cluster node API is untyped
        keys: set[bytes] = set()
        partial = False
        for node in cluster.get_primaries():
            node_keys, cut = _scan_node(cluster.get_redis_connection(node))
            keys |= node_keys
            partial = partial or cut
        return _queue_names(keys), partial
    keys, partial = _scan_node(client)
    return _queue_names(keys), partial


class Directory:
    """The queues to show, and whether a name is one of them."""

    def __init__(self, client: redis.Redis | redis.RedisCluster, queues: Sequence[str]) -> None:
        self._client = client
        self._given = tuple(queues)
        self._found: Listing | None = None
        self._found_at = 0.0
        self._lock = asyncio.Lock()

    async def listing(self) -> Listing:
        if self._given:
            return Listing(self._given, partial=False, discovered=False)
        async with self._lock:  # one scan at a time, however many pages ask
            if self._found is None or time.monotonic() - self._found_at > _KEEP_SECONDS:
                names, partial = await asyncio.to_thread(_scan, self._client)
                self._found = Listing(tuple(sorted(names)), partial, discovered=True)
                self._found_at = time.monotonic()
            return self._found

    async def knows(self, name: str) -> bool:
        """Whether `name` is a queue to show: one given, else one that has keys now."""
        if self._given:
            return name in self._given
        if name in (await self.listing()).names:
            return True
        # Made since the last scan? One EXISTS answers it without scanning again.
        # (On a cluster the client splits EXISTS by slot; a queue's keys share its hash tag's.)
        keys = [_PREFIX + encode(name) + b":" + suffix for suffix in sorted(_SUFFIXES)]
        return int(await asyncio.to_thread(self._client.exists, *keys)) > 0
