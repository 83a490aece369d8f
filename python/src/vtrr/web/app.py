"""The ASGI app: its routes, and how errors become pages (never a traceback)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence

import redis
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from .. import metrics
from ..errors import VTRRError, WrongType
from . import actions, pages, stream
from .access import SESSION_S, Guard, Refused, refusal
from .poller import describe
from .view import BadInput, Endpoint, NotFound, WebView


def _error_page(web: WebView, request: Request, status: int, message: str) -> Response:
    if web.fragment(request):
        return web.render(request, "_banner.html", status, banner=message)
    return web.render(request, "error.html", status, banner=message, title=f"Error {status}")


def create_app(
    client: redis.Redis | redis.RedisCluster,
    queues: Sequence[str],
    *,
    write_token: str | None = None,
    session_s: float = SESSION_S,
    interval_s: float = 1.0,
    top_k: int = 20,
) -> Starlette:
    """The web view of these queues (all found by SCAN when `queues` is empty); a login
    lasts `session_s` seconds."""
    web = WebView(
        client,
        queues,
        write_token=write_token,
        session_s=session_s,
        interval_s=interval_s,
        top_k=top_k,
    )

    async def not_found(request: Request, error: Exception) -> Response:
        return _error_page(web, request, 404, str(error) or "There is no such page.")

    async def bad_input(request: Request, error: Exception) -> Response:
        return _error_page(web, request, 400, str(error))

    async def refused(request: Request, error: Exception) -> Response:
        return refusal(request, str(error))

    async def redis_error(request: Request, error: Exception) -> Response:
        if isinstance(error, WrongType):
            return _error_page(web, request, 404, f"Not a vtrr queue: {error}")
        if isinstance(error, redis.exceptions.ConnectionError | redis.exceptions.TimeoutError):
            return _error_page(web, request, 503, describe(error))
        return _error_page(web, request, 502, describe(error))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        web.pollers.stop_all()

    app = Starlette(
        routes=[
            Route("/", pages.queues(web)),
            Route("/events", stream.queues(web)),
            Route("/queue", pages.queue(web)),
            Route("/queue/events", stream.queue(web)),
            Route("/queue/tenants", pages.tenants(web)),
            Route("/queue/tenant", pages.tenant(web)),
            Route("/queue/dead", pages.dead(web)),
            Route("/login", pages.login(web), methods=["GET", "POST"]),
            Route("/logout", pages.logout(web), methods=["POST"]),
            Route("/actions/{action}", actions.endpoint(web), methods=["POST"]),
            Route("/metrics", _metrics(web, queues)),
            Mount("/static", StaticFiles(packages=[("vtrr.web", "static")]), name="static"),
        ],
        exception_handlers={
            404: not_found,
            NotFound: not_found,
            BadInput: bad_input,
            Refused: refused,
            redis.exceptions.RedisError: redis_error,
            VTRRError: redis_error,
        },
        middleware=[Middleware(Guard, access=web.access)],
        lifespan=lifespan,
    )
    app.state.web = web
    return app


def close_streams(app: Starlette) -> None:
    """Make the app's event streams end (each after its next event): call it when the
    server starts shutting down. Safe from any thread or a signal handler."""
    app.state.web.closing = True


def _metrics(web: WebView, queues: Sequence[str]) -> Endpoint:
    """`/metrics`: vtrr.metrics' collector (that of `vtrr exporter`), read at each scrape."""
    # One collector for the app's life: it logs a queue it cannot read once, not per scrape.
    registry = metrics.registry_for(metrics.QueueCollector(web.client, queues, top_k=web.top_k))

    async def endpoint(request: Request) -> Response:
        body = await asyncio.to_thread(generate_latest, registry)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    return endpoint
