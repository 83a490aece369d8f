"""Real redis-server processes with the module loaded, for the suites.

`VTRR_MODULE` (default: the repository's target/debug/libvtrr.so),
`VTRR_REDIS_SERVER` (default `redis-server`) and `VTRR_LAYOUT` (`keys`, the
default, or `native`: the layout every queue is created in) choose what runs,
as they do for the Rust suites.
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import redis

REPO = Path(__file__).resolve().parents[2]
SLOTS = 16384


def module_path() -> str:
    return os.environ.get("VTRR_MODULE", str(REPO / "target" / "debug" / "libvtrr.so"))


def server_binary() -> str:
    return os.environ.get("VTRR_REDIS_SERVER", "redis-server")


def layout() -> str:
    value = os.environ.get("VTRR_LAYOUT", "keys")
    if value not in ("keys", "native"):
        raise RuntimeError(f"VTRR_LAYOUT must be keys or native, not {value}")
    return value


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A free port whose cluster bus port (+10000) is free too, as a cluster node needs."""
    while True:
        port = random.randint(20_000, 55_000)
        if _bindable(port) and _bindable(port + 10_000):
            return port


class Server:
    """One redis-server on a free loopback port, its own directory, the module loaded."""

    def __init__(
        self,
        module_args: tuple[str, ...] = (),
        extra: tuple[str, ...] = (),
        *,
        with_module: bool = True,
    ) -> None:
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="vtrr-py-"))
        args = [
            server_binary(),
            "--port", str(self.port), "--bind", "127.0.0.1",
            "--dir", str(self.dir), "--logfile", str(self.dir / "redis.log"),
            "--save", "", "--appendonly", "no",
            # A replica's full sync starts at once, not after 5 s.
            "--repl-diskless-sync-delay", "0",
        ]  # fmt: skip
        if with_module:
            args += ["--loadmodule", module_path(), *module_args]
            if "default-layout" not in module_args:
                args += ["default-layout", layout()]
        self._args = [*args, *extra]
        self._launch()

    def _launch(self) -> None:
        self.process = subprocess.Popen(
            self._args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                if self.client().ping():
                    return
            except redis.exceptions.ConnectionError:
                pass
            if self.process.poll() is not None:
                raise RuntimeError(f"redis-server exited; log:\n{self.log()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start; log:\n{self.log()}")
            time.sleep(0.02)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self, **options: object) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, **options)  # type: ignore[arg-type]

    def log(self) -> str:
        try:
            return (self.dir / "redis.log").read_text()
        except OSError:
            return ""

    def kill(self) -> None:
        """SIGKILL, as a crash: nothing more is written; its files stay."""
        self.process.kill()
        self.process.wait()

    def start(self) -> None:
        """Start again on the same port and directory (it loads its AOF or RDB)."""
        self._launch()

    def kill_and_restart(self) -> None:
        """SIGKILL, then start again at once."""
        self.kill()
        self.start()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


class Cluster:
    """`masters` masters on loopback sharing the slots evenly, met by hand."""

    def __init__(self, masters: int = 3, module_args: tuple[str, ...] = ()) -> None:
        extra = (
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            "2000",
        )
        self.nodes: list[Server] = []
        try:
            for _ in range(masters):
                self.nodes.append(Server(module_args, extra))
            per_master = SLOTS // masters
            for index, node in enumerate(self.nodes):
                last = SLOTS - 1 if index == masters - 1 else (index + 1) * per_master - 1
                node.client().execute_command("CLUSTER", "ADDSLOTSRANGE", index * per_master, last)
            for node in self.nodes[1:]:
                node.client().execute_command("CLUSTER", "MEET", "127.0.0.1", self.nodes[0].port)
            deadline = time.monotonic() + 30
            while not all(self._ok(node) for node in self.nodes):
                if time.monotonic() > deadline:
                    raise RuntimeError("cluster did not come up")
                time.sleep(0.05)
        except BaseException:
            self.stop()
            raise

    @staticmethod
    def _ok(node: Server) -> bool:
        info = node.client().execute_command("CLUSTER", "INFO")
        text = info.decode() if isinstance(info, bytes) else str(info)
        return "cluster_state:ok" in text

    def client(self) -> redis.RedisCluster:
        return redis.RedisCluster(host="127.0.0.1", port=self.nodes[0].port)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
