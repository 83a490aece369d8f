"""`vtrr web`: the operator's web view of vtrr queues (`pip install 'vtrr[web]'`).

`create_app` makes the ASGI app (Starlette, Jinja2 templates, htmx and
server-sent events); `serve` runs it with uvicorn. Read-only unless given a
write token. See the "Web view" section of the package's README.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from types import FrameType

import redis
import uvicorn

from .access import SESSION_S
from .app import close_streams, create_app

__all__ = ["close_streams", "create_app", "serve"]


def serve(
    client: redis.Redis | redis.RedisCluster,
    queues: Sequence[str],
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    write_token: str | None = None,
    session_s: float = SESSION_S,
    interval_s: float = 1.0,
    top_k: int = 20,
) -> None:
    """Serve the web view until interrupted (SIGINT or SIGTERM)."""
    # The action log (logger vtrr.web, INFO) is the audit trail: show it
    # unless the caller already set logging up.
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    app = create_app(
        client,
        queues,
        write_token=write_token,
        session_s=session_s,
        interval_s=interval_s,
        top_k=top_k,
    )
    config = uvicorn.Config(
        app, host=host, port=port, log_level="info", timeout_graceful_shutdown=5
    )
    _Server(config, on_exit=lambda: close_streams(app)).run()


class _Server(uvicorn.Server):
    """uvicorn's server, telling the app when a signal asks it to stop: an open page's
    event stream never ends by itself, and a graceful shutdown waits for it to."""

    def __init__(self, config: uvicorn.Config, on_exit: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_exit = on_exit

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self._on_exit()
        super().handle_exit(sig, frame)
