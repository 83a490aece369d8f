"""The pages (GET): queues, a queue, its tenants ranked, one tenant, its dead letters; login.

A GET that htmx sends (`HX-Request`) gets only the part of the page it
refreshes after an action.
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

import redis
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ..errors import VTRRError
from ..types import RANKS
from . import charts
from .access import COOKIE, TooManyTries
from .names import is_text, parsed_form
from .poller import QueuePoller, Sample
from .view import BadInput, Endpoint, WebView, int_param, local_path, query

QUEUES_PER_PAGE = 50
TENANTS_PER_PAGE = 50
# The dead letters a tenant's page looks through for its own (VTRR.DEAD has
# no partition filter): the oldest this many of the queue's.
DEAD_SAMPLE = 1000


def live_context(poller: QueuePoller, sample: Sample) -> dict[str, Any]:
    """What the live part of a queue page shows: the latest sample and the charts."""
    history = list(poller.history)
    now = time.time()
    return {
        "sample": sample,
        "stats": sample.stats,
        "throughput": charts.throughput(history, now),
        "waiting": charts.waiting(history, now),
        "service": charts.service(history, now),
        "interval_s": poller.interval_s,
    }


def queues(web: WebView) -> Endpoint:
    async def endpoint(request: Request) -> Response:
        listing = await web.directory.listing()
        offset = int_param(query(request), "offset", 0, 0, 10**9)
        shown_names = listing.names[offset : offset + QUEUES_PER_PAGE]
        async with web.pollers.watching(*shown_names) as pollers:
            samples = await asyncio.gather(*(web.sample_of(p) for p in pollers))
        return web.render(
            request,
            "queues.html",
            listing=listing,
            rows=list(zip(shown_names, samples, strict=True)),
            offset=offset,
            per_page=QUEUES_PER_PAGE,
        )

    return endpoint


def queue(web: WebView) -> Endpoint:
    async def endpoint(request: Request) -> Response:
        name = await web.queue_named(request)
        try:
            policy = await asyncio.to_thread(web.queue(name).policy)
        except (redis.exceptions.RedisError, VTRRError):
            policy = None  # the live part's banner says why
        if web.fragment(request):
            return web.render(request, "_policy.html", q=name, policy=policy)
        async with web.pollers.watching(name) as (poller,):
            sample = await web.sample_of(poller)
        return web.render(
            request, "queue.html", q=name, policy=policy, **live_context(poller, sample)
        )

    return endpoint


def tenants(web: WebView) -> Endpoint:
    async def endpoint(request: Request) -> Response:
        name = await web.queue_named(request)
        params = query(request)
        by = params.get("by") or "queued"
        if by not in RANKS:
            raise BadInput(f"by must be one of {', '.join(RANKS)}")
        offset = int_param(params, "offset", 0, 0, 10**9)
        count = int_param(params, "count", TENANTS_PER_PAGE, 1, 500)
        ranked, views = await asyncio.to_thread(web.queue(name).partitions_top, count, by, offset)
        return web.render(
            request,
            "_tenants_table.html" if web.fragment(request) else "tenants.html",
            q=name,
            by=by,
            ranks=RANKS,
            offset=offset,
            count=count,
            ranked=ranked,
            views=views,
        )

    return endpoint


def tenant(web: WebView) -> Endpoint:
    async def endpoint(request: Request) -> Response:
        name = await web.queue_named(request)
        tenant_name = query(request).get("t")
        if tenant_name is None:
            raise BadInput("t (the tenant) is missing")
        target = web.queue(name)
        view = await asyncio.to_thread(target.partition, tenant_name)
        dead = await asyncio.to_thread(target.dead, DEAD_SAMPLE)
        return web.render(
            request,
            "_tenant_detail.html" if web.fragment(request) else "tenant.html",
            q=name,
            t=tenant_name,
            view=view,
            dead=[item for item in dead if item.partition == tenant_name],
            dead_searched=len(dead),
            dead_complete=len(dead) < DEAD_SAMPLE,
        )

    return endpoint


def dead(web: WebView) -> Endpoint:
    async def endpoint(request: Request) -> Response:
        name = await web.queue_named(request)
        count = int_param(query(request), "count", 100, 1, DEAD_SAMPLE)
        target = web.queue(name)
        items = await asyncio.to_thread(target.dead, count)
        stats = await asyncio.to_thread(target.stats)
        return web.render(
            request,
            "_dead_table.html" if web.fragment(request) else "dead.html",
            q=name,
            items=items,
            count=count,
            total=stats.dead,
        )

    return endpoint


def login(web: WebView) -> Endpoint:
    async def endpoint(request: Request) -> Response:
        next_page = local_path(query(request).get("next", "/"))
        if request.method == "GET" or not web.access.writable:
            return web.render(request, "login.html", next_page=next_page, problem=None)
        form = parsed_form(await request.body())
        token = form.get("token", "")
        if not is_text(token):
            raise BadInput("the token is not UTF-8 text")
        try:
            right = await web.access.try_token(request, token, "login form")
        except TooManyTries as error:
            page = web.render(request, "login.html", 429, next_page=next_page, problem=str(error))
            page.headers["Retry-After"] = str(error.retry_after_s)
            return page
        if not right:
            problem = "That is not the write token."
            return web.render(request, "login.html", 403, next_page=next_page, problem=problem)
        response = RedirectResponse(local_path(form.get("next", "/")), status_code=303)
        response.set_cookie(
            COOKIE,
            web.access.log_in(request),
            max_age=math.ceil(web.access.session_s),
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            path="/",
        )
        return response

    return endpoint


def logout(web: WebView) -> Endpoint:
    async def endpoint(request: Request) -> Response:
        await web.access.log_out(request)
        response = RedirectResponse("/", status_code=303)
        response.delete_cookie(COOKIE, path="/")
        return response

    return endpoint
