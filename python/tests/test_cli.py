"""The `vtrr` command line, run as a real process against a real server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from servers import Server, free_port

import vtrr
from vtrr import Item

# The console script pip installed beside the interpreter: the entry point users run.
VTRR = str(Path(sys.executable).parent / "vtrr")


def vtrr_cli(server_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [VTRR, "--url", server_url, *args],
        capture_output=True, text=True, timeout=30, env={**os.environ}, cwd=Path(__file__).parent,
    )  # fmt: skip


def test_stats_as_a_table_and_as_json(server: Server, queue: vtrr.Queue) -> None:
    queue.enqueue_many([Item("a", "1", b""), Item("b", "2", b"")])
    table = vtrr_cli(server.url, "stats", queue.name)
    assert table.returncode == 0, table.stderr
    lines = dict(line.split(None, 1) for line in table.stdout.splitlines())
    assert lines["queued"] == "2" and lines["next_due_ms"] == "-"
    as_json = json.loads(vtrr_cli(server.url, "stats", queue.name, "--json").stdout)
    assert as_json["queued"] == 2 and as_json["next_due_ms"] is None


def test_partitions_lists_every_partition(server: Server, queue: vtrr.Queue) -> None:
    queue.enqueue_many([Item("alice", "1", b""), Item("alice", "2", b""), Item("bob", "3", b"")])
    queue.pause("bob")
    table = vtrr_cli(server.url, "partitions", queue.name).stdout.splitlines()
    assert table[0].split()[:3] == ["partition", "queued", "held"]
    rows = {line.split()[0]: line.split() for line in table[1:]}
    assert rows["alice"][1] == "2" and rows["bob"][6] == "True"
    as_json = json.loads(vtrr_cli(server.url, "partitions", queue.name, "--json").stdout)
    assert {row["partition"]: row["queued"] for row in as_json} == {"alice": 2, "bob": 1}
    one = json.loads(
        vtrr_cli(server.url, "partitions", queue.name, "--partition", "bob", "--json").stdout
    )
    assert one[0]["paused"] is True


def test_dead_and_revive(server: Server, queue: vtrr.Queue) -> None:
    queue.enqueue("tenant", "job-1", b"\xff binary")
    lease = queue.lease(1000)
    assert lease is not None and queue.nack(lease, dead=True)
    table = vtrr_cli(server.url, "dead", queue.name).stdout.splitlines()
    assert table[1].split()[:3] == ["job-1", "tenant", "1"] and "nack" in table[1]
    [row] = json.loads(vtrr_cli(server.url, "dead", queue.name, "--json").stdout)
    assert row["payload"] == {"base64": "/yBiaW5hcnk="}, (
        "a payload that is not UTF-8 comes out as base64"
    )
    revived = vtrr_cli(server.url, "revive", queue.name, "job-1", "nope")
    assert revived.returncode == 1 and revived.stdout.strip() == "revived 1 of 2"
    assert queue.stats().queued == 1
    assert vtrr_cli(server.url, "dead", queue.name).stdout.strip() == "no dead items"


def test_errors_are_one_line_and_a_nonzero_exit(server: Server) -> None:
    unreachable = vtrr_cli(f"redis://127.0.0.1:{free_port()}/0", "stats", "q")
    assert unreachable.returncode == 2 and unreachable.stderr.startswith("vtrr: cannot reach")
    refused = vtrr_cli(server.url, "dead", "q", "--count", "0")
    assert refused.returncode == 2 and "COUNT must be a positive integer" in refused.stderr
    bad_option = vtrr_cli(server.url, "worker", "jobs:record", "--queue", "q", "--concurrency", "0")
    assert bad_option.returncode == 2
    assert bad_option.stderr == "vtrr worker: concurrency must be an integer between 1 and 100000\n"
    bad_handler = vtrr_cli(server.url, "worker", "no_such_module:run", "--queue", "q")
    assert bad_handler.returncode != 0 and "cannot load 'no_such_module:run'" in bad_handler.stderr
