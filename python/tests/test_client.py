"""Queue: every command through the typed client, against a real server."""

from __future__ import annotations

import pytest

import vtrr
from vtrr import Item


def test_enqueue_lease_ack_round_trip(queue: vtrr.Queue) -> None:
    assert queue.enqueue("alice", "a1", b"payload-1", weight=2)
    assert not queue.enqueue("alice", "a1", b"again"), "an id already queued is skipped"
    lease = queue.lease(30_000)
    assert lease is not None
    assert (lease.id, lease.payload, lease.timeouts, lease.nacks) == ("a1", b"payload-1", 0, 0)
    assert len(lease.token) == 32
    assert queue.stats().inflight == 1
    assert queue.ack(lease) == 1
    assert queue.ack(lease) == 0, "a second ACK of the same lease acks nothing"
    assert queue.lease(30_000) is None
    assert queue.check() == []
