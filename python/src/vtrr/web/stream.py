"""Server-sent events: the live part of a page, sent again after each poll.

A stream watches the pollers of what its page shows and sends one `live`
event per poll, the HTML fragment htmx's SSE extension swaps in. Streams
never read Redis themselves: however many are open, a queue is polled once
per interval. When Redis cannot be reached the fragment carries the banner,
and the stream goes on, so the page recovers by itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from .names import quoted
from .pages import QUEUES_PER_PAGE, live_context
from .view import Endpoint, WebView, int_param, query

_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}  # no proxy buffering


def event(name: str, html: str) -> str:
    """One SSE event; each line of the fragment is a `data:` line."""
    data = "".join(f"data: {line}\n" for line in html.splitlines() or [""])
    return f"event: {name}\n{data}\n"


def queue(web: WebView) -> Endpoint:
    async def endpoint(request: Request) -> Response:
        name = await web.queue_named(request)
        page = f"/queue?q={quoted(name)}"

        async def events() -> AsyncIterator[str]:
            async with web.pollers.watching(name) as (poller,):
                sample = await web.sample_of(poller)
                while not web.closing:
                    html = web.templates.get_template("_queue_live.html").render(
                        q=name,
                        here=page,
                        **web.access_context(request),
                        **live_context(poller, sample),
                    )
                    yield event("live", html)
                    sample = await poller.next_sample()

        return StreamingResponse(events(), media_type="text/event-stream", headers=_HEADERS)

    return endpoint


def queues(web: WebView) -> Endpoint:
    async def endpoint(request: Request) -> Response:
        listing = await web.directory.listing()
        offset = int_param(query(request), "offset", 0, 0, 10**9)
        shown_names = listing.names[offset : offset + QUEUES_PER_PAGE]

        async def events() -> AsyncIterator[str]:
            async with web.pollers.watching(*shown_names) as pollers:
                while not web.closing:
                    samples = await asyncio.gather(*(web.sample_of(p) for p in pollers))
                    html = web.templates.get_template("_queues_table.html").render(
                        rows=list(zip(shown_names, samples, strict=True))
                    )
                    yield event("live", html)
                    await asyncio.sleep(web.interval_s)

        return StreamingResponse(events(), media_type="text/event-stream", headers=_HEADERS)

    return endpoint
