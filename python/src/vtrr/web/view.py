"""What every route shares: the client, the queues, the pollers, who may write,
the templates; and the request parameters they all read.

Every request reads what it shows from Redis through the blocking client in
a worker thread (`asyncio.to_thread`), so a slow reply never holds up the
event loop that serves the streams.
"""

from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import jinja2
import redis
from markupsafe import Markup
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from ..client import Queue
from ..types import PartitionView, Rate
from . import charts
from .access import CSRF_FIELD, CSRF_HEADER, Access
from .directory import Directory
from .names import is_text, parsed_form, quoted, shown
from .poller import Pollers, QueuePoller, Sample

_PREVIEW_BYTES = 80
_NOTHING = "\N{EN DASH}"  # a table cell with nothing to show, as the templates write it

Endpoint = Callable[[Request], Awaitable[Response]]


class NotFound(Exception):
    """A queue the app does not show, or a page that is not there: a 404 page."""


class BadInput(Exception):
    """A parameter the app cannot take: a 400 page saying which."""


def _finalize(value: Any) -> Any:
    # Every {{ }} goes through here: a name's non-UTF-8 bytes (surrogates)
    # would make the page unencodable, a control character would break a line.
    if isinstance(value, str) and not isinstance(value, Markup):
        return shown(value)
    return value


def _duration(ms: int | None) -> str:
    if ms is None:
        return "-"
    if ms < 1000:
        return f"{ms} ms"
    seconds = ms / 1000
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def rate_text(rate: Rate | None) -> str:
    """A rate as `5/1000ms` (and `, burst 10` when its burst is not its amount); `none`."""
    if rate is None:
        return "none"
    burst = "" if rate.burst is None or rate.burst == rate.amount else f", burst {rate.burst}"
    return f"{rate.amount}/{rate.per_ms}ms{burst}"


def _next_token(view: PartitionView) -> str:
    """When a tenant's next token is due, from now (this machine's clock): `in 120 ms`,
    `due now` once due; a dash without a rate or while it holds a token."""
    if view.next_token_ms is None:
        return _NOTHING
    ms = view.next_token_ms - int(time.time() * 1000)
    return "due now" if ms <= 0 else "in " + _duration(ms)


def _tokens(view: PartitionView) -> str:
    """A tenant's bucket for a table cell: its tokens, and while it holds none when the
    next is due (`0, next in 120 ms`); a dash without a rate."""
    if view.tokens is None:
        return _NOTHING
    if view.next_token_ms is None:
        return str(view.tokens)
    return f"{view.tokens}, next {_next_token(view)}"


def _died(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime(
        "%Y-%m-%d %H:%M:%S UTC"
    )


def _preview(payload: bytes) -> str:
    """A payload's start, as text (bytes that are not UTF-8 as \\xNN)."""
    text = payload[:_PREVIEW_BYTES].decode("utf-8", "backslashreplace")
    return text + ("…" if len(payload) > _PREVIEW_BYTES else "")


class WebView:
    """What every route shares: the client, the queues, the pollers, who may write."""

    def __init__(
        self,
        client: redis.Redis | redis.RedisCluster,
        queues: Sequence[str],
        *,
        write_token: str | None,
        session_s: float,
        interval_s: float,
        top_k: int,
    ) -> None:
        if interval_s <= 0:
            raise ValueError("interval_s must be positive")
        if top_k < 1:
            raise ValueError("top_k must be at least 1")
        self.client = client
        self.interval_s = interval_s
        self.top_k = top_k
        self.directory = Directory(client, queues)
        self.pollers = Pollers(client, interval_s=interval_s, top_k=top_k)
        self.access = Access(write_token, session_s)
        #: Set when the server shuts down: each event stream ends after its next
        #: event, so a graceful shutdown does not wait for every open tab.
        self.closing = False
        self.templates = jinja2.Environment(
            loader=jinja2.PackageLoader("vtrr.web", "templates"),
            autoescape=True,
            finalize=_finalize,
            undefined=jinja2.StrictUndefined,
        )
        self.templates.globals.update(csrf_field=CSRF_FIELD, csrf_header=CSRF_HEADER)
        self.templates.filters.update(
            quoted=quoted,
            compact=charts.compact,
            duration=_duration,
            died=_died,
            preview=_preview,
            rate=rate_text,
            tokens=_tokens,
            next_token=_next_token,
        )

    def render(
        self, request: Request, template: str, status_code: int = 200, **context: Any
    ) -> HTMLResponse:
        context.setdefault("banner", None)
        context.setdefault("here", here(request))
        page = self.templates.get_template(template).render(
            **self.access_context(request), **context
        )
        return HTMLResponse(page, status_code=status_code)

    def access_context(self, request: Request) -> dict[str, Any]:
        """What every template needs to know of writing: who writes (no buttons when
        nobody), whether the app takes writes, and the session's CSRF token for its forms."""
        session = self.access.session(request)
        return {
            "writer": self.access.writer(request),
            "writable": self.access.writable,
            "csrf": session.csrf if session else None,
        }

    def queue(self, name: str) -> Queue:
        return Queue(self.client, name)

    def fragment(self, request: Request) -> bool:
        """Whether htmx asked for the part of a page it swaps, not the whole page."""
        return request.headers.get("hx-request") == "true"

    async def sample_of(self, poller: QueuePoller) -> Sample:
        """The poller's latest sample; if it has none yet, the first, waited for a while."""
        wait_s = max(5.0, 2 * self.interval_s)
        try:
            return await asyncio.wait_for(poller.sample(), wait_s)
        except TimeoutError:
            return Sample(time.time(), None, (), (), error=f"Redis did not answer in {wait_s:g} s")

    async def queue_named(self, request: Request) -> str:
        """The queue a request names (`q`), one the app shows; else a 404 page."""
        name = query(request).get("q", "")
        if not name or not await self.directory.knows(name):
            raise NotFound(f"There is no queue named {shown(name)!r} here.")
        return name


def here(request: Request) -> str:
    """This page's URL (path and query), for a form to come back to."""
    query_string = request.scope["query_string"].decode("latin-1")
    return request.url.path + ("?" + query_string if query_string else "")


def local_path(path: str) -> str:
    """A redirect target on this site only (no `//host`, no scheme, no backslash trick) and
    text (a byte that is not UTF-8 cannot go in a Location header); else `/`."""
    local = path.startswith("/") and not path.startswith(("//", "/\\"))
    return path if local and is_text(path) else "/"


def query(request: Request) -> dict[str, str]:
    return parsed_form(request.scope["query_string"])


def int_param(params: dict[str, str], key: str, default: int, low: int, high: int) -> int:
    """An integer parameter between `low` and `high`, else a 400 page saying so."""
    raw = params.get(key, "")
    if raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadInput(f"{key} must be an integer, not {shown(raw)!r}") from None
    if not low <= value <= high:
        raise BadInput(f"{key} must be between {low} and {high}")
    return value
