"""Queue over redis-py's RedisCluster: routing by the queue's hash tag, and a live slot move."""

from __future__ import annotations

import asyncio
import threading
import time

import redis.asyncio
from servers import Cluster

import vtrr
from vtrr import Item


def owner_of(cluster: Cluster, slot: int) -> int:
    for index, node in enumerate(cluster.nodes):
        for first, last, *_ in node.client().execute_command("CLUSTER", "SLOTS"):
            if first <= slot <= last and int(_[0][1]) == node.port:
                return index
    raise AssertionError(f"no owner for slot {slot}")


def start_moving(cluster: Cluster, queue_name: str) -> tuple[int, int, int]:
    """Marks the queue's slot MIGRATING on its owner, IMPORTING on the next node: (slot, source, target)."""
    slot = int(cluster.client().cluster_keyslot(queue_name))
    source = owner_of(cluster, slot)
    target = (source + 1) % len(cluster.nodes)
    src, dst = cluster.nodes[source].client(), cluster.nodes[target].client()
    dst.execute_command(
        "CLUSTER", "SETSLOT", slot, "IMPORTING", src.execute_command("CLUSTER", "MYID")
    )
    src.execute_command(
        "CLUSTER", "SETSLOT", slot, "MIGRATING", dst.execute_command("CLUSTER", "MYID")
    )
    return slot, source, target


def test_a_queue_is_routed_by_its_hash_tag(cluster: Cluster, queue_name: str) -> None:
    queue = vtrr.Queue(cluster.client(), queue_name)
    queue.enqueue_many(Item(f"p{i % 5}", f"i{i}", b"x") for i in range(50))
    leases = queue.lease_many(1000, 50)
    assert len(leases) == 50 and queue.ack(*leases) == 50
    assert queue.check() == []


def test_an_async_queue_over_an_async_cluster_client(cluster: Cluster, queue_name: str) -> None:
    async def scenario() -> None:
        client = redis.asyncio.RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port)
        queue = vtrr.AsyncQueue(client, queue_name)
        assert await queue.enqueue_many(Item(f"p{i % 3}", f"i{i}", b"x") for i in range(9)) == 9
        leases = await queue.lease_many(1000, 9)
        assert len(leases) == 9 and await queue.ack(*leases) == 9
        assert await queue.check() == []
        await client.aclose()

    asyncio.run(scenario())


def test_commands_wait_out_a_live_slot_move(cluster: Cluster, queue_name: str) -> None:
    client = cluster.client()
    queue = vtrr.Queue(client, queue_name)
    queue.enqueue_many(Item("p", f"i{i}", b"x") for i in range(10))
    slot, source, target = start_moving(cluster, queue_name)
    src = cluster.nodes[source].client()
    dst_id = cluster.nodes[target].client().execute_command("CLUSTER", "MYID")
    moved = threading.Event()

    def finish_the_move() -> None:
        time.sleep(0.5)  # the client meanwhile gets ASK, then TRYAGAIN from the importing node
        keys = src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100)
        src.execute_command(
            "MIGRATE", "127.0.0.1", cluster.nodes[target].port, "", 0, 5000, "KEYS", *keys
        )
        for node in cluster.nodes:
            node.client().execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)
        moved.set()

    mover = threading.Thread(target=finish_the_move)
    started = time.monotonic()
    mover.start()
    time.sleep(0.1)
    try:
        leases = queue.lease_many(1000, 10)
    finally:
        mover.join()
    assert moved.is_set() and time.monotonic() - started >= 0.5, (
        "the lease was served after the move"
    )
    assert sorted(lease.id for lease in leases) == sorted(f"i{i}" for i in range(10))
    assert queue.ack(*leases) == 10
    assert owner_of(cluster, slot) == target


def test_a_slot_that_never_settles_raises_slot_moving(cluster: Cluster, queue_name: str) -> None:
    client = cluster.client()
    queue = vtrr.Queue(client, queue_name, retry_seconds=0.5)
    queue.enqueue("p", "i", b"x")
    slot, source, target = start_moving(cluster, queue_name)
    try:
        started = time.monotonic()
        try:
            queue.stats()
        except vtrr.SlotMoving:
            pass
        else:
            raise AssertionError("a command on a half-moved queue was served")
        assert time.monotonic() - started >= 0.5
    finally:
        for index in (source, target):
            cluster.nodes[index].client().execute_command("CLUSTER", "SETSLOT", slot, "STABLE")
    assert queue.stats().queued == 1, "nothing was lost while the slot was stuck"
