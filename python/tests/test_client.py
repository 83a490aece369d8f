"""Queue and AsyncQueue: every command through the typed client, against a real server."""

from __future__ import annotations

import asyncio
import dataclasses
import re
import threading
import time

import pytest
import redis
import redis.asyncio
from redis.backoff import NoBackoff
from redis.retry import Retry
from servers import REPO, Cluster, Server, layout

import vtrr
from vtrr import Item
from vtrr.client import QUEUE_KEY_SUFFIXES
from vtrr.exchange import Exchange


def test_enqueue_lease_ack_round_trip(queue: vtrr.Queue) -> None:
    assert queue.enqueue("alice", "a1", b"payload-1", weight=2)
    assert not queue.enqueue("alice", "a1", b"again"), "an id already queued is skipped"
    lease = queue.lease(30_000)
    assert lease is not None
    assert (lease.id, lease.payload, lease.timeouts, lease.nacks) == ("a1", b"payload-1", 0, 0)
    assert lease.partition == "alice"
    assert len(lease.token) == 32
    assert queue.stats().inflight == 1
    assert queue.ack(lease) == 1
    assert queue.ack(lease) == 0, "a second ACK of the same lease acks nothing"
    assert queue.lease(30_000) is None
    assert queue.check() == []


def test_priorities_are_strict_between_levels_and_fair_inside_one(queue: vtrr.Queue) -> None:
    queue.enqueue_many([Item("a", f"a{n}", b"") for n in range(3)])
    queue.enqueue_many([Item("a", "a-high", b""), Item("b", "b-high", b"")], priority=7)
    assert queue.enqueue("c", "c-low", b"", priority=-100)
    assert queue.defer(0, [Item("d", "d-high", b"")], priority=7) == 1
    leased = [lease.id for lease in queue.lease_many(30_000, 10)]
    assert leased == ["a-high", "b-high", "d-high", "a0", "a1", "a2", "c-low"]
    assert queue.check() == []


def test_a_priority_out_of_range_is_refused_before_anything_is_sent(queue: vtrr.Queue) -> None:
    for bad, error in [
        (101, vtrr.InvalidArgument),
        (-101, vtrr.InvalidArgument),
        (True, TypeError),
    ]:
        with pytest.raises(error, match="priority"):
            queue.enqueue("p", "x", b"", priority=bad)  # type: ignore[arg-type]
    with pytest.raises(redis.ResponseError, match="PRIORITY must be an integer between -100"):
        queue.client.execute_command(
            "VTRR.ENQUEUE", queue.name, "PRIORITY", "101", "p", "x", "1", "X"
        )
    assert queue.stats().queued == 0


def test_ack_and_lease_settles_and_leases_in_one_call(queue: vtrr.Queue) -> None:
    queue.enqueue_many([Item("p", f"i{n}", b"") for n in range(4)])
    first, second = queue.lease_many(30_000, 2)
    assert queue.ack(second) == 1
    got = queue.ack_and_lease([first, second], 30_000, 5)
    assert got.acked == (True, False), "second was acked already: reported, not an error"
    assert [lease.id for lease in got.leases] == ["i2", "i3"]
    assert queue.stats().inflight == 2
    with pytest.raises(ValueError):
        queue.ack_and_lease([], 30_000, 1)


def test_ack_with_costs_charges_each_partition_what_its_job_cost(queue: vtrr.Queue) -> None:
    queue.enqueue_many(Item(p, f"{p}{n}", b"") for n in range(8) for p in ("a", "b"))
    first = queue.lease(30_000)
    assert first is not None and first.id == "a0"
    # Declared weight 1, reported 5: a's next items move 4 turns back.
    assert queue.ack(first, costs=[5]) == 1
    order = [lease.id for lease in queue.lease_many(30_000, 6)]
    assert order == ["b0", "b1", "b2", "b3", "b4", "a1"], order


def test_ack_and_lease_reports_costs_and_bad_costs_change_nothing(queue: vtrr.Queue) -> None:
    queue.enqueue_many(Item(p, f"{p}{n}", b"") for n in range(8) for p in ("a", "b"))
    a0, b0 = queue.lease_many(30_000, 2)
    for costs, error in (
        ([-1, 1], vtrr.InvalidArgument),
        ([1, 1_000_000_001], vtrr.InvalidArgument),
        ([1, 2, 3], ValueError),
    ):
        with pytest.raises(error):
            queue.ack_and_lease([a0, b0], 30_000, 1, costs=costs)
    assert queue.stats().inflight == 2, "a refused call acks nothing"
    got = queue.ack_and_lease([a0, b0], 30_000, 3, costs=[9, 1])
    assert got.acked == (True, True)
    assert [lease.id for lease in got.leases] == ["b1", "b2", "b3"]
    assert queue.check() == []


def test_renew_with_a_cost_charges_the_partition_while_the_job_runs(queue: vtrr.Queue) -> None:
    queue.enqueue_many(Item(p, f"{p}{n}", b"") for n in range(6) for p in ("a", "b"))
    first = queue.lease(30_000)
    assert first is not None and first.id == "a0"
    assert queue.renew(first, 30_000, cost=3), "renewed, and a charged 3 so far"
    order = [lease.id for lease in queue.lease_many(30_000, 5)]
    assert order == ["b0", "b1", "b2", "b3", "a1"], order
    with pytest.raises(vtrr.InvalidArgument, match="cost"):
        queue.renew(first, 30_000, cost=-1)
    # The finish reports the rest: 0 more, so a's whole charge is the 3.
    assert queue.ack(first, costs=[0]) == 1
    assert queue.check() == []


def test_a_rate_limit_is_set_shown_enforced_at_lease_and_removed(queue: vtrr.Queue) -> None:
    queue.set_limit("slow", rate=vtrr.Rate(amount=2, per_ms=60_000))
    assert queue.limit("slow").rate == vtrr.Rate(amount=2, per_ms=60_000, burst=2)
    queue.enqueue_many(Item(p, f"{p}{n}", b"") for n in range(4) for p in ("slow", "fast"))
    leased = [lease.id for lease in queue.lease_many(30_000, 8)]
    assert sorted(leased) == ["fast0", "fast1", "fast2", "fast3", "slow0", "slow1"]
    view = queue.partition("slow")
    assert (view.queued, view.held, view.tokens) == (2, 2, 0), "held, not leased and put back"
    assert view.next_token_ms is not None and view.next_token_ms > time.time() * 1000
    with pytest.raises(vtrr.InvalidArgument, match="RATE"):
        queue.set_limit("slow", rate=vtrr.Rate(amount=0, per_ms=1000))
    queue.set_limit("slow", rate="NONE")
    assert queue.limit("slow").rate is None
    assert sorted(lease.id for lease in queue.lease_many(30_000, 8)) == ["slow2", "slow3"]
    assert queue.check() == []


def test_nack_tells_where_the_item_went_and_release_counts_no_nack(queue: vtrr.Queue) -> None:
    queue.set_policy(max_nacks=0)
    queue.enqueue("p", "a", b"")
    lease = queue.lease(30_000)
    assert lease is not None
    assert queue.release(lease)
    assert not queue.release(lease), "a released lease is no longer current"
    again = queue.lease(30_000)
    assert again is not None and again.nacks == 0, "a release counts no nack"
    assert queue.nack(again, delay_ms=10) is vtrr.NackOutcome.DEAD, "MAX-NACKS 0 buries it"
    assert queue.nack(again) is None
    queue.set_policy(max_nacks="NONE")
    queue.enqueue("p", "b", b"")
    lease = queue.lease(30_000)
    assert lease is not None
    assert queue.nack(lease, delay_ms=60_000) is vtrr.NackOutcome.DELAYED


def test_partitions_are_served_in_turn_by_weight(queue: vtrr.Queue) -> None:
    queue.enqueue_many([Item("light", f"l{i}", b"") for i in range(4)])
    queue.enqueue_many([Item("heavy", f"h{i}", b"", weight=3) for i in range(2)])
    order = [lease.id for lease in queue.lease_many(1000, 6)]
    # Scores: light 1, 2, 3, 4; heavy 1, then 1 + 3 (ties by id).
    assert order == ["h0", "l0", "l1", "l2", "h1", "l3"]


def test_ids_partitions_and_payloads_are_binary_safe(queue: vtrr.Queue) -> None:
    odd = b"\xff\x00id".decode("utf-8", "surrogateescape")
    queue.enqueue(odd, odd, b"\x00\xff payload")
    lease = queue.lease(1000)
    assert lease is not None and lease.id == odd and lease.payload == b"\x00\xff payload"
    assert queue.partition(odd).leased == 1
    assert queue.ack(lease) == 1


def test_defer_holds_an_item_until_it_is_due(queue: vtrr.Queue) -> None:
    assert queue.defer(300, [Item("p", "later", b"x")]) == 1
    stats = queue.stats()
    assert (stats.delayed, stats.queued) == (1, 0) and stats.next_due_ms is not None
    assert queue.lease(1000) is None
    lease = queue.lease(1000, block_ms=3000)
    assert lease is not None and lease.id == "later"


def test_a_blocking_lease_waits_for_an_item(queue: vtrr.Queue, server: Server) -> None:
    producer = vtrr.Queue(server.client(), queue.name)
    waiting = vtrr.Queue(server.client(socket_timeout=120), queue.name)
    started = time.monotonic()
    threading.Timer(0.3, lambda: producer.enqueue("p", "arrives", b"x")).start()
    lease = waiting.lease(1000, block_ms=60_000)
    assert lease is not None and lease.id == "arrives"
    # It waited for the item, and was woken by it, not by the end of its wait (a
    # minute: a loaded machine may take seconds to enqueue it).
    assert 0.25 < time.monotonic() - started < 30
    assert queue.lease(1000, block_ms=100) is None, "a timed-out wait replies None"
    assert queue.lease_many(1000, 5, block_ms=100) == []


def test_renew_nack_and_reclaim(queue: vtrr.Queue) -> None:
    queue.enqueue("p", "i", b"x")
    first = queue.lease(50)
    assert first is not None and queue.renew(first, 60_000)
    assert queue.nack(first, delay_ms=0)
    assert not queue.renew(first, 1000), "a nacked lease is no longer current"
    second = queue.lease(1)
    assert second is not None and second.nacks == 1
    time.sleep(0.01)
    assert queue.reclaim() in (0, 1), "the timer may have reclaimed it already"
    third = queue.lease(1000, block_ms=2000)
    assert third is not None and (third.timeouts, third.nacks) == (1, 1)
    assert queue.nack(third, dead=True)
    [dead] = queue.dead()
    assert (dead.id, dead.partition, dead.weight, dead.reason) == ("i", "p", 1, "nack")
    assert dead.last_error is None, "no nack said what failed"
    assert queue.revive("i", "not-dead") == 1
    assert queue.stats().queued == 1
    assert queue.cancel("i") == 1
    assert queue.stats().queued == 0


def test_policy_limits_pause_and_the_partition_view(queue: vtrr.Queue) -> None:
    assert queue.policy() == vtrr.Policy(None, None, None)
    queue.set_policy(max_timeouts=3, max_nacks="NONE", default_concurrency=5)
    assert queue.policy() == vtrr.Policy(max_timeouts=3, max_nacks=None, default_concurrency=5)
    queue.set_limit("t", concurrency=1, share=2)
    assert queue.limit("t") == vtrr.PartitionSettings(concurrency=1, paused=False, share=2)
    queue.enqueue_many([Item("t", "t1", b""), Item("t", "t2", b""), Item("u", "u1", b"")])
    leased = queue.lease_many(1000, 3)
    assert sorted(lease.id for lease in leased) == ["t1", "u1"], "t is capped at 1 lease"
    view = queue.partition("t")
    assert (view.queued, view.held, view.leased, view.concurrency_in_force, view.share) == (
        1,
        1,
        1,
        1,
        2,
    )
    assert queue.pause("u") and not queue.pause("u")
    queue.enqueue("u", "u2", b"")
    stats = queue.stats()
    assert (stats.partitions, stats.queued_partitions) == (2, 2), "t at its cap, u paused: held"
    queue.ack(*leased)
    assert [lease.id for lease in queue.lease_many(1000, 5)] == ["t2"], "u is paused"
    assert queue.resume("u") and not queue.resume("u")
    assert queue.stats().paused_partitions == 0
    assert queue.partition("never-seen") == vtrr.PartitionView(
        "never-seen", 0, 0, 0, 0, 0, False, 1, None, 5, None, None, vtrr.Totals(0, 0, 0, 0, 0, 0)
    )


def test_a_default_rate_holds_every_partition_without_its_own(queue: vtrr.Queue) -> None:
    day = vtrr.Rate(amount=1, per_ms=86_400_000, burst=2)
    queue.set_policy(default_rate=day)
    assert queue.policy() == vtrr.Policy(None, None, None, default_rate=day)
    queue.set_limit("own", rate=vtrr.Rate(amount=100, per_ms=1000))
    queue.enqueue_many(Item(p, f"{p}{i}", b"") for p in ("a", "own") for i in range(4))
    leased = queue.lease_many(1000, 10)
    assert sorted(lease.id for lease in leased) == ["a0", "a1", "own0", "own1", "own2", "own3"]
    view = queue.partition("a")
    assert (view.rate, view.rate_in_force, view.tokens) == (None, day, 0)
    assert queue.partition("own").rate_in_force == vtrr.Rate(100, 1000, 100)
    queue.set_policy(default_rate="NONE")
    assert sorted(lease.id for lease in queue.lease_many(1000, 10)) == ["a2", "a3"]
    assert queue.policy().default_rate is None


def test_the_queues_own_cap_and_rate_hold_every_partition_together(queue: vtrr.Queue) -> None:
    assert queue.stats().tokens is None, "no queue rate, no bucket"
    minute = vtrr.Rate(amount=5, per_ms=60_000, burst=4)
    queue.set_policy(concurrency=3, rate=minute, default_concurrency=2)
    assert queue.policy() == vtrr.Policy(
        None, None, default_concurrency=2, concurrency=3, rate=minute
    )
    assert queue.stats().tokens == 4, "a new rate starts full"
    queue.enqueue_many(Item(p, f"{p}{n}", b"") for n in range(5) for p in ("a", "b"))
    # The cap stops the lease at 3, in turn (each partition's own cap is 2).
    assert sorted(lease.id for lease in queue.lease_many(60_000, 10)) == ["a0", "a1", "b0"]
    assert queue.stats().tokens == 1
    queue.set_policy(concurrency="NONE")
    # Now the bucket: its last token, then nothing until the next is due.
    assert [lease.id for lease in queue.lease_many(60_000, 10)] == ["b1"]
    assert queue.stats().tokens == 0 and queue.lease_many(60_000, 10) == []
    stats = queue.stats()
    assert (stats.queued, stats.inflight) == (6, 4), "held, not leased and put back"
    with pytest.raises(vtrr.InvalidArgument, match="CONCURRENCY"):
        queue.set_policy(concurrency=0)
    with pytest.raises(vtrr.InvalidArgument, match="RATE"):
        queue.set_policy(rate=vtrr.Rate(amount=0, per_ms=1000))
    queue.set_policy(rate="NONE")
    assert queue.policy() == vtrr.Policy(None, None, default_concurrency=2)
    assert queue.stats().tokens is None
    queue.set_policy(default_concurrency="NONE")
    assert len(queue.lease_many(60_000, 10)) == 6
    assert queue.check() == []


def test_max_queued_refuses_an_enqueue_past_it_whole(
    queue: vtrr.Queue, client: redis.Redis
) -> None:
    def refused_full() -> int:
        return int(client.info("vtrr")["vtrr_items_refused_full"])

    def counts() -> tuple[object, ...]:
        """What a refused call must leave as it was (the wait time moves on its own)."""
        stats = queue.stats()
        return (stats.queued, stats.delayed, stats.inflight, stats.partitions, stats.totals)

    assert queue.limit("a").max_queued is None and queue.policy().default_max_queued is None
    queue.set_limit("a", max_queued=2)
    assert queue.limit("a") == vtrr.PartitionSettings(None, False, 1, max_queued=2)
    assert queue.enqueue_many([Item("a", "a1", b""), Item("b", "b1", b"")]) == 2
    before, refused_before = counts(), refused_full()
    # b's item is refused with a's: a call is one answer, all or nothing.
    mixed = [Item("b", "b2", b""), Item("a", "a2", b""), Item("a", "a3", b"")]
    with pytest.raises(vtrr.PartitionFull) as full:
        queue.enqueue_many(mixed)
    assert str(full.value) == (
        "partition 'a' has 1 items waiting and MAX-QUEUED 2: the call would add 2;"
        " nothing was enqueued"
    )
    assert (full.value.partition, full.value.waiting, full.value.max_queued, full.value.adds) == (
        "a", 1, 2, 2,
    )  # fmt: skip
    assert isinstance(full.value, vtrr.VTRRError) and not isinstance(full.value, ValueError)
    assert counts() == before and queue.job("b2").state == "unknown"
    assert refused_full() == refused_before + 3, "INFO counts the refused call's items"
    # A delayed item waits too: DEFER counts against the same limit.
    with pytest.raises(vtrr.PartitionFull):
        queue.defer(60_000, [Item("a", "a2", b""), Item("a", "a3", b"")])
    assert queue.defer(60_000, [Item("a", "a2", b"")]) == 1
    # Ids already in the queue take no room; a new one finds it full.
    assert queue.enqueue_many([Item("a", "a1", b""), Item("a", "a2", b"")]) == 0
    with pytest.raises(vtrr.PartitionFull, match="has 2 items waiting"):
        queue.enqueue("a", "a3", b"")
    # A leased item no longer waits.
    assert sorted(lease.id for lease in queue.lease_many(60_000, 5)) == ["a1", "b1"]
    assert queue.enqueue("a", "a3", b"")

    # The default holds every partition without its own; a partition's own wins.
    queue.set_policy(default_max_queued=1)
    assert queue.policy().default_max_queued == 1
    b, a = queue.partition("b"), queue.partition("a")
    assert (b.max_queued, b.max_queued_in_force, a.max_queued, a.max_queued_in_force) == (
        None, 1, 2, 2,
    )  # fmt: skip
    assert queue.enqueue("b", "b2", b"")
    with pytest.raises(vtrr.PartitionFull, match="MAX-QUEUED 1"):
        queue.enqueue("b", "b3", b"")
    # NONE on the partition puts it under the default; NONE on the default lifts it.
    queue.set_limit("a", max_queued="NONE")
    assert queue.partition("a").max_queued_in_force == 1
    with pytest.raises(vtrr.PartitionFull, match="partition 'a' has 2 items waiting"):
        queue.enqueue("a", "a4", b"")
    queue.set_policy(default_max_queued="NONE")
    assert queue.partition("a").max_queued_in_force is None
    assert (
        queue.enqueue_many(Item(p, f"{p}{n}", b"") for p in ("a", "b") for n in range(4, 9)) == 10
    )

    with pytest.raises(vtrr.InvalidArgument, match=r"^MAX-QUEUED must be an integer between 1"):
        queue.set_limit("a", max_queued=0)
    with pytest.raises(vtrr.InvalidArgument, match=r"^DEFAULT-MAX-QUEUED must be an integer"):
        queue.set_policy(default_max_queued=1_000_000_001)
    assert queue.limit("a").max_queued is None and queue.policy().default_max_queued is None
    assert queue.check() == []


def test_a_full_partitions_name_is_read_back_whatever_its_bytes(queue: vtrr.Queue) -> None:
    """The server quotes a partition's odd bytes in its message (\\xNN, \\n, \\\\); the
    error reads them back, even a name that holds the message's own words."""
    tricky = (
        "caf\udce9 \\x41\n' has 9 items waiting and MAX-QUEUED 9:"
        " the call would add 9; nothing was enqueued"
    )
    queue.set_limit(tricky, max_queued=1)
    queue.enqueue(tricky, "first", b"")
    with pytest.raises(vtrr.PartitionFull) as full:
        queue.enqueue(tricky, "second", b"")
    assert (full.value.partition, full.value.waiting, full.value.max_queued, full.value.adds) == (
        tricky, 1, 1, 1,
    )  # fmt: skip
    # A message that does not read as the module's (its wording, its quoting) still makes
    # the class, without the fields.
    tail = " has 1 items waiting and MAX-QUEUED 1: the call would add 1; nothing was enqueued"
    for message in (
        "partition 'x' is full",
        f"partition 'a\\q'{tail}",
        f"partition 'caf\xe9'{tail}",
    ):
        odd = vtrr.PartitionFull(message)
        assert (odd.partition, odd.waiting, odd.max_queued, odd.adds) == (None, None, None, None)
    assert vtrr.PartitionFull(f"partition 'a\\\\q'{tail}").partition == "a\\q"


def test_partitions_iterates_every_partition_in_bounded_steps(queue: vtrr.Queue) -> None:
    queue.enqueue_many(Item(f"tenant-{i}", f"i{i}", b"") for i in range(1500))
    first_cursor, first_page = queue.partitions_page(count=100)
    assert first_cursor != 0 and 0 < len(first_page) < 1500
    names = {view.partition for view in queue.partitions(count=200)}
    assert names == {f"tenant-{i}" for i in range(1500)}


def test_recount_inspect_and_convert(queue: vtrr.Queue) -> None:
    queue.enqueue_many([Item("p", "a", b"1"), Item("p", "b", b"2")])
    assert queue.recount() == 0, "the module's counts are already exact"
    assert queue.inspect("queue")[::2] == [b"a", b"b"]
    other = "native" if layout() == "keys" else "keys"
    assert queue.stats().layout == layout()
    assert queue.convert(other) and not queue.convert(other)
    assert queue.stats().layout == other
    assert [lease.id for lease in queue.lease_many(1000, 2)] == ["a", "b"]
    assert queue.check() == []


def test_bad_arguments_raise_and_change_nothing(queue: vtrr.Queue, client: redis.Redis) -> None:
    with pytest.raises(
        vtrr.InvalidArgument, match="weight must be an integer between 1 and 1000000000"
    ):
        queue.enqueue_many([Item("p", "ok", b""), Item("p", "bad", b"", weight=0)])
    with pytest.raises(vtrr.InvalidArgument, match="id must not be empty"):
        queue.enqueue("p", "", b"")
    with pytest.raises(vtrr.InvalidArgument, match="lease-ms"):
        queue.lease(0)
    with pytest.raises(TypeError, match="weight must be an int"):
        queue.enqueue("p", "x", b"", weight="3")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at least one"):
        queue.enqueue_many([])
    assert queue.stats().queued == 0, "a refused call enqueues nothing"
    client.set(f"vtrr:{queue.name}:queue", "not a sorted set")
    with pytest.raises(vtrr.WrongType, match="vtrr:"):
        queue.enqueue("p", "x", b"")
    with pytest.raises(ValueError):
        vtrr.Queue(client, "")


def test_acl_denial_is_no_permission(server: Server, queue_name: str) -> None:
    admin = server.client()
    admin.execute_command("ACL", "SETUSER", "reader", "on", ">secret", "+@all", "~other:*")
    user = vtrr.Queue(server.client(username="reader", password="secret"), queue_name)
    with pytest.raises(vtrr.NoPermission, match="no permissions"):
        user.enqueue("p", "x", b"")


def test_a_server_without_the_module_says_so(make_server) -> None:  # type: ignore[no-untyped-def]
    bare = make_server(with_module=False)
    says = (
        f"the vtrr module is not loaded on redis://127.0.0.1:{bare.port}/0: "
        "add `loadmodule /path/to/libvtrr.so` to its configuration"
    )
    queue = vtrr.Queue(bare.client(), "q")
    with pytest.raises(vtrr.ModuleNotLoaded, match=re.escape(says)):
        queue.stats()
    with pytest.raises(vtrr.ModuleNotLoaded, match=re.escape(says)):
        queue.exchange(Exchange(1000, renews=(vtrr.Lease("i", b"", "t", 0, 0),), count=1))
    assert issubclass(vtrr.ModuleNotLoaded, vtrr.VTRRError)

    async def from_async() -> None:
        client = redis.asyncio.Redis(host="127.0.0.1", port=bare.port)
        with pytest.raises(vtrr.ModuleNotLoaded, match=re.escape(says)):
            await vtrr.AsyncQueue(client, "q").stats()
        await client.aclose()

    asyncio.run(from_async())


def test_the_key_suffixes_are_the_modules() -> None:
    """`exists` asks for every key a queue can have: each logical key of src/store/vocabulary.rs."""
    source = (REPO / "src" / "store" / "vocabulary.rs").read_text()
    named = re.findall(r'QueueKey::\w+ => "(\w+)"', source)
    assert len(named) >= 30
    assert sorted(QUEUE_KEY_SUFFIXES) == sorted(named)


def test_a_queue_exists_once_it_has_any_key(
    server: Server, queue_name: str, client: redis.Redis
) -> None:
    queue = vtrr.Queue(client, queue_name)
    assert not queue.exists() and queue.stats().queued == 0, "the module answers zeros"
    queue.set_limit("zed", share=2)  # a partition's settings alone
    assert queue.exists()
    scheduled = vtrr.Queue(client, queue_name + "s")
    scheduled.schedule("nightly", cron="@daily", partition="ops", payload=b"")  # a schedule alone
    assert scheduled.exists()
    scheduled.unschedule("nightly")
    assert not scheduled.exists(), "nothing left of it"
    drained = vtrr.Queue(client, queue_name + "d")
    drained.enqueue("a", "1", b"")
    lease = drained.lease(1000)
    assert lease is not None and drained.ack(lease) == 1
    assert drained.exists(), "a drained queue keeps its totals"

    async def from_async() -> tuple[bool, bool]:
        async_client = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
        found = (
            await vtrr.AsyncQueue(async_client, queue_name).exists(),
            await vtrr.AsyncQueue(async_client, queue_name + "x").exists(),
        )
        await async_client.aclose()
        return found

    assert asyncio.run(from_async()) == (True, False)


def test_exists_on_a_cluster(cluster: Cluster, queue_name: str) -> None:
    client = cluster.client()
    tagged = vtrr.Queue(client, queue_name)
    assert not tagged.exists()
    tagged.enqueue("a", "1", b"")
    assert tagged.exists()
    # Without a hash tag a name's keys spread over slots (no queue can live
    # there): the client splits EXISTS by slot and finds none.
    assert not vtrr.Queue(client, "no-tag-" + queue_name.strip("{}")).exists()
    client.close()


def test_async_queue_speaks_the_same_commands(server: Server, queue_name: str) -> None:
    async def scenario() -> None:
        client = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
        queue = vtrr.AsyncQueue(client, queue_name)
        assert await queue.enqueue_many([Item("p", "a", b"1"), Item("q", "b", b"2")]) == 2
        leases = await queue.lease_many(1000, 2)
        assert [lease.id for lease in leases] == ["a", "b"]
        assert await queue.renew(leases[0], 5000)
        assert sorted([view.partition async for view in queue.partitions()]) == ["p", "q"]
        assert await queue.release(leases[1])
        got = await queue.ack_and_lease(leases, 1000, 1)
        assert (got.acked, [lease.id for lease in got.leases]) == ((True, False), ["b"])
        assert await queue.nack(got.leases[0]) is vtrr.NackOutcome.QUEUED
        again = await queue.lease_many(1000, 1)
        assert await queue.ack(*again, costs=[7]) == 1
        assert (await queue.stats()).inflight == 0
        with pytest.raises(vtrr.InvalidArgument):
            await queue.enqueue("p", "", b"")
        await queue.set_limit("p", max_queued=1)
        with pytest.raises(vtrr.PartitionFull):
            await queue.enqueue_many([Item("p", "c", b"3"), Item("p", "d", b"4")])
        await client.aclose()

    asyncio.run(scenario())


def test_replies_read_the_same_under_resp2_and_resp3(server: Server, queue_name: str) -> None:
    """redis-py 8 speaks RESP3 by default (maps); RESP2 clients get flat arrays: one parser reads both."""
    seen = []
    for protocol in (2, 3):
        queue = vtrr.Queue(server.client(protocol=protocol), f"{queue_name}{protocol}")
        queue.enqueue_many([Item("p", "i", b"x"), Item("p", "j", b"y")])
        queue.set_limit("p", share=2, max_queued=5)
        queue.set_policy(default_max_queued=7)
        # The wait is measured when asked: the two readings are apart in time.
        view = dataclasses.replace(queue.partition("p"), waiting_ms=None)
        seen.append((queue.stats().queued, queue.policy(), queue.limit("p"), view))
        lease = queue.lease(1000)
        assert lease is not None
        got = queue.ack_and_lease([lease], 1000, 2)
        assert (got.acked, [each.id for each in got.leases]) == ((True,), ["j"])
        assert queue.nack(got.leases[0], delay_ms=60_000) is vtrr.NackOutcome.DELAYED
    assert seen[0] == seen[1]
    assert seen[0][2].share == 2 and seen[0][2].max_queued == 5
    assert seen[0][1].default_max_queued == 7 and seen[0][3].max_queued_in_force == 5


def test_a_nacks_reason_is_the_dead_items_last_error(queue: vtrr.Queue) -> None:
    queue.enqueue("p\xff", "i", b"x")
    lease = queue.lease(60_000)
    assert lease is not None and lease.partition == "p\xff"
    assert queue.nack(lease, reason=b"first \xff") is vtrr.NackOutcome.QUEUED
    lease = queue.lease(60_000)
    assert lease is not None
    for bad in ("", "x" * 4097, "é" * 2049):
        with pytest.raises(vtrr.InvalidArgument, match="REASON must be between 1 and 4096 bytes"):
            queue.nack(lease, reason=bad)
    with pytest.raises(TypeError):
        queue.nack(lease, reason=7)  # type: ignore[arg-type]
    assert queue.stats().inflight == 1, "refused before it was sent"
    assert queue.nack(lease, dead=True, reason="KeyError: 'k'\n  in run") is vtrr.NackOutcome.DEAD
    [dead] = queue.dead()
    assert (dead.reason, dead.nacks, dead.last_error) == ("nack", 2, "KeyError: 'k'\n  in run")
    assert queue.revive("i") == 1
    again = queue.lease(60_000)
    assert again is not None and queue.nack(again, dead=True)
    assert queue.dead()[0].last_error is None, "revived, it started afresh"


def test_job_tells_where_each_item_is(queue: vtrr.Queue, server: Server) -> None:
    queue.enqueue("p", "leased", b"x", weight=2)
    lease = queue.lease(60_000)
    assert lease is not None and lease.id == "leased"
    queue.set_limit("p", concurrency=1)
    queue.enqueue("p", "held", b"x")
    queue.defer(60_000, [Item("d", "delayed", b"x")])
    queue.enqueue("r", "queued", b"x", priority=3)
    states = {job.id: job.state for job in queue.jobs("queued", "held", "leased", "delayed", "no")}
    assert states == {
        "queued": "queued",
        "held": "held",
        "leased": "leased",
        "delayed": "delayed",
        "no": "unknown",
    }
    leased = queue.job("leased")
    assert (leased.partition, leased.weight, leased.priority) == ("p", 2, 0)
    assert leased.expires_ms is not None and leased.due_ms is None
    assert queue.job("queued").priority == 3
    unknown = queue.job("no")
    assert (unknown.partition, unknown.weight, unknown.timeouts) == (None, None, None)
    assert queue.ack(lease) == 1
    assert queue.job("leased").state == "unknown", "acked: nothing of it is kept"
    assert queue.job("held").state == "queued", "the freed slot let it in"
    with pytest.raises(ValueError):
        queue.jobs()

    async def from_async() -> None:
        client = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
        aqueue = vtrr.AsyncQueue(client, queue.name)
        assert (await aqueue.job("delayed")).state == "delayed"
        await client.aclose()

    asyncio.run(from_async())


def test_a_finished_jobs_outcome_and_result_are_kept_and_read(
    queue: vtrr.Queue, server: Server
) -> None:
    assert (queue.policy().result_ttl_ms, queue.policy().dedup_ms) == (None, None)
    queue.set_policy(result_ttl_ms=60_000, dedup_ms=30_000)
    assert (queue.policy().result_ttl_ms, queue.policy().dedup_ms) == (60_000, 30_000)
    queue.enqueue_many([Item("p", name, b"x") for name in ("a", "b", "c", "d", "e", "f")])
    a, b, c, d, e = queue.lease_many(60_000, 5)
    assert queue.ack(a, results=[b"\x00ok"]) == 1
    got = queue.ack_and_lease([b, c], 60_000, 1, results=["é", b""])
    assert got.acked == (True, True) and [lease.id for lease in got.leases] == ["f"]
    assert queue.nack(d) is vtrr.NackOutcome.QUEUED
    assert queue.ack(d, results=[b"late"]) == 0, "a lost lease finishes nothing"
    assert queue.cancel("e", "f") == 2
    assert queue.ack(e, results=[b"late"]) == 0

    done = queue.result("a")
    assert done is not None and (done.state, done.result) == ("done", b"\x00ok")
    assert done.finished_ms is not None and done.finished_ms > 0
    assert queue.job("a") == done, "VTRR.JOB gives the same map"
    kept = [queue.result(name) for name in ("b", "c")]
    assert [status and status.result for status in kept] == ["é".encode(), b""]
    cancelled = queue.result("e")
    assert cancelled is not None and (cancelled.state, cancelled.result) == ("cancelled", None)
    assert queue.result("d") is None, "queued again: not finished"
    assert queue.job("d").result is None and queue.job("d").state == "queued"
    assert queue.result("never") is None
    again = queue.lease(60_000)
    assert again is not None and queue.nack(again, dead=True, reason="boom")
    dead = queue.result("d")
    assert dead is not None and (dead.state, dead.reason, dead.last_error) == (
        "dead",
        "nack",
        "boom",
    )
    # Read the same under RESP2 as under redis-py's RESP3.
    resp2 = vtrr.Queue(server.client(protocol=2), queue.name)
    assert resp2.result("a") == done and resp2.policy() == queue.policy()

    with pytest.raises(ValueError, match="costs and results cannot be combined"):
        queue.ack(a, costs=[1], results=[b"x"])
    with pytest.raises(ValueError, match="2 results for 1 leases"):
        queue.ack(a, results=[b"x", b"y"])
    queue.set_policy(result_ttl_ms="NONE", dedup_ms="NONE")
    assert (queue.policy().result_ttl_ms, queue.policy().dedup_ms) == (None, None)


def test_a_result_is_at_most_a_mebibyte(queue: vtrr.Queue, client: redis.Redis) -> None:
    queue.set_policy(result_ttl_ms=60_000)
    queue.enqueue_many([Item("p", "big", b"x"), Item("p", "max", b"x")])
    big, largest = queue.lease_many(60_000, 2)
    too_long = "result must be at most 1048576 bytes"

    def sent() -> int:
        """How many VTRR.ACKRESULT and VTRR.LEASE calls the server has run."""
        stats = client.info("commandstats")
        return sum(
            stats.get(f"cmdstat_vtrr.{name}", {}).get("calls", 0) for name in ("ackresult", "lease")
        )

    before = sent()
    with pytest.raises(vtrr.InvalidArgument, match=too_long):
        queue.ack(big, results=[b"x" * 1_048_577])
    with pytest.raises(vtrr.InvalidArgument):
        queue.ack_and_lease([big], 60_000, 1, results=["é" * 524_289])
    with pytest.raises(TypeError):
        queue.ack(big, results=[7])  # type: ignore[list-item]
    assert sent() == before, "refused before it was sent"
    # The module's own refusal, in the same words, writes nothing either.
    with pytest.raises(redis.ResponseError, match=too_long):
        client.execute_command("VTRR.ACKRESULT", queue.name, big.id, big.token, b"x" * 1_048_577)
    assert queue.job("big").state == "leased"
    assert queue.ack(largest, results=[b"y" * 1_048_576]) == 1
    kept = queue.result("max")
    assert kept is not None and kept.result == b"y" * 1_048_576


def test_result_waits_for_the_ack_that_finishes_the_job(queue: vtrr.Queue, server: Server) -> None:
    queue.set_policy(result_ttl_ms=60_000)
    queue.enqueue("p", "slow", b"x")
    lease = queue.lease(60_000)
    assert lease is not None
    assert queue.result("slow", block_ms=300) is None, "a wait that times out replies None"
    # The waiting client's socket timeout is shorter than the wait, and it does
    # not retry (redis-py's default retries would send a cut BLOCK again): the
    # wait is sent in BLOCKs of a second, so the timeout never cuts it short.
    no_retry = Retry(NoBackoff(), 0)
    waiting = vtrr.Queue(server.client(socket_timeout=1.5, retry=no_retry), queue.name)
    acker = vtrr.Queue(server.client(), queue.name)
    started = time.monotonic()
    threading.Timer(2.5, lambda: acker.ack(lease, results=[b"42"])).start()
    status = waiting.result("slow", block_ms=60_000)
    assert status is not None and (status.state, status.result) == ("done", b"42")
    # Woken by the ACK (after the socket timeout had passed), not by the end of the wait.
    assert 2.4 < time.monotonic() - started < 45
    assert waiting.result("slow", block_ms=0) == status, "a finished job is answered at once"


def test_async_result_waits_without_holding_the_event_loop(
    queue: vtrr.Queue, server: Server
) -> None:
    queue.set_policy(result_ttl_ms=60_000)
    queue.enqueue("p", "job", b"x")
    lease = queue.lease(60_000)
    assert lease is not None

    async def scenario() -> None:
        client = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
        aqueue = vtrr.AsyncQueue(client, queue.name)
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.01)

        ticking = asyncio.create_task(tick())
        threading.Timer(0.5, lambda: queue.ack(lease, results=["done"])).start()
        status = await aqueue.result("job", block_ms=60_000)
        ticking.cancel()
        assert status is not None and (status.state, status.result) == ("done", b"done")
        assert ticks >= 10, "the loop ran other tasks while the result was awaited"
        assert await aqueue.result("other", block_ms=100) is None
        await client.aclose()

    asyncio.run(scenario())


def test_dedup_skips_an_id_that_finished_within_the_window(queue: vtrr.Queue) -> None:
    queue.enqueue_many([Item("p", "acked", b"x"), Item("p", "cancelled", b"x")])
    lease = queue.lease(60_000)
    assert lease is not None and queue.ack(lease) == 1
    assert queue.enqueue("p", "acked", b"x"), "no DEDUP-MS: a finished id is new again"
    assert queue.cancel("acked") == 1
    queue.set_policy(dedup_ms=60_000)
    lease = queue.lease(60_000)
    assert lease is not None and lease.id == "cancelled" and queue.ack(lease) == 1
    assert not queue.enqueue("p", "cancelled", b"x"), "acked within DEDUP-MS: skipped"
    queue.enqueue("p", "gone", b"x")
    assert queue.cancel("gone") == 1
    assert queue.defer(10, [Item("p", "gone", b"x"), Item("p", "new", b"x")]) == 1
    finished = queue.job("cancelled")
    assert (finished.state, finished.result) == ("done", None), "no RESULT-TTL: no result kept"
    assert queue.job("gone").state == "cancelled"
