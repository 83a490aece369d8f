"""The actions (POST): pause, resume, limit (cap, share, rate), policy, revive, cancel.

`POST /actions/<action>?q=<queue>&t=<tenant>` or `...&id=<item>`; the values
(cap, share, rate, policy) in the urlencoded body. A rate is `rate` (weight
units), `per_ms` and an optional `burst`; `rate=none` removes it. A value the
form cannot take is refused before anything is sent; one out of the module's
range, by the module, which checks every option before it writes any. Only
a writer may (`access.py`: the bearer token, or a session and its CSRF
token): anyone else gets 403. Each action is logged on `vtrr.web` as one
line: who, what, queue, tenant or item, result. htmx gets a one-line message
for the page's flash area and the `vtrr-changed` event, on which the page
refreshes what it shows; a plain form post is sent back to its page.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from typing import Literal

import redis
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ..client import Queue
from ..commands import Limit
from ..errors import VTRRError
from ..types import Rate
from .names import shown
from .poller import describe
from .view import BadInput, Endpoint, NotFound, WebView, local_path, query, rate_text

log = logging.getLogger("vtrr.web")


def _is_count(raw: str) -> bool:
    # ASCII only: str.isdigit() also takes "²", which int() refuses.
    return raw.isascii() and raw.isdigit()


def _limit(form: dict[str, str], key: str) -> Limit:
    """A cap or policy field: empty leaves it as it is, "none" clears it, else a count."""
    raw = form.get(key, "").strip()
    if raw == "":
        return None
    if raw.lower() == "none":
        return "NONE"
    if not _is_count(raw):
        raise BadInput(f"{key} must be a whole number or none, not {shown(raw)!r}")
    return int(raw)


def _count(form: dict[str, str], key: str, what: str) -> int | None:
    """A field that is a whole number, or empty (None)."""
    raw = form.get(key, "").strip()
    if raw and not _is_count(raw):
        raise BadInput(f"{key} ({what}) must be a whole number, not {shown(raw)!r}")
    return int(raw) if raw else None


def _rate(form: dict[str, str]) -> Rate | Literal["NONE"] | None:
    """The rate fields: `rate` empty leaves the rate as it is (and then per_ms and burst
    must be empty too), "none" removes it, else `rate` per `per_ms` ms, `burst` optional."""
    amount = _limit(form, "rate")
    per_ms = _count(form, "per_ms", "the rate's period in ms")
    burst = _count(form, "burst", "the most tokens the bucket holds")
    if (per_ms is not None or burst is not None) and amount is None:
        raise BadInput("per_ms and burst go with a rate: give rate too")
    if (per_ms is not None or burst is not None) and amount == "NONE":
        raise BadInput("rate none removes the rate: leave per_ms and burst empty")
    if amount is None or amount == "NONE":
        return amount
    if per_ms is None:
        raise BadInput("a rate needs per_ms (its period in ms)")
    return Rate(amount, per_ms, burst)


def _required(params: dict[str, str], key: str, what: str) -> str:
    value = params.get(key)
    if not value:
        raise BadInput(f"{key} ({what}) is missing")
    return value


def _pause(queue: Queue, tenant: str) -> str:
    return "paused" if queue.pause(tenant) else "was already paused"


def _resume(queue: Queue, tenant: str) -> str:
    return "resumed" if queue.resume(tenant) else "was not paused"


def _set_limit(form: dict[str, str]) -> Callable[[Queue, str], str]:
    concurrency = _limit(form, "concurrency")
    share_raw = form.get("share", "").strip()
    if share_raw and not _is_count(share_raw):
        raise BadInput(f"share must be a whole number, not {shown(share_raw)!r}")
    share = int(share_raw) if share_raw else None
    rate = _rate(form)
    if concurrency is None and share is None and rate is None:
        raise BadInput("give a cap (concurrency), a share or a rate")

    def run(queue: Queue, tenant: str) -> str:
        queue.set_limit(tenant, concurrency=concurrency, share=share, rate=rate)
        settings = queue.limit(tenant)
        cap = "none" if settings.concurrency is None else settings.concurrency
        return f"cap {cap}, share {settings.share}, rate {rate_text(settings.rate)}"

    return run


def _set_policy(form: dict[str, str]) -> Callable[[Queue], str]:
    max_timeouts, max_nacks = _limit(form, "max_timeouts"), _limit(form, "max_nacks")
    if max_timeouts is None and max_nacks is None:
        raise BadInput("give max_timeouts or max_nacks")

    def run(queue: Queue) -> str:
        queue.set_policy(max_timeouts=max_timeouts, max_nacks=max_nacks)
        policy = queue.policy()
        return f"max-timeouts {policy.max_timeouts}, max-nacks {policy.max_nacks}"

    return run


def _revive(queue: Queue, item_id: str) -> str:
    return "revived" if queue.revive(item_id) else "not dead (already revived or gone)"


def _cancel(queue: Queue, item_id: str) -> str:
    return "cancelled" if queue.cancel(item_id) else "not in the queue"


ACTIONS = ("pause", "resume", "limit", "policy", "revive", "cancel")


def endpoint(web: WebView) -> Endpoint:
    async def act(request: Request) -> Response:
        action = request.path_params["action"]
        if action not in ACTIONS:
            raise NotFound(f"There is no action {shown(action)!r}.")
        writer, form = await web.access.authorize(request)
        params = query(request)
        name = await web.queue_named(request)
        queue = web.queue(name)
        run: Callable[[], str]
        what = f"{action} queue={name!r}"
        if action in ("pause", "resume", "limit"):
            tenant = _required(params, "t", "the tenant")
            what += f" tenant={tenant!r}"
            change = {"pause": _pause, "resume": _resume}.get(action) or _set_limit(form)
            run = functools.partial(change, queue, tenant)
            message = f"{action} {tenant}"
        elif action in ("revive", "cancel"):
            item_id = _required(params, "id", "the item")
            what += f" item={item_id!r}"
            run = functools.partial(_revive if action == "revive" else _cancel, queue, item_id)
            message = f"{action} {item_id}"
        else:
            run = functools.partial(_set_policy(form), queue)
            message = action
        try:
            result = await asyncio.to_thread(run)
        except (redis.exceptions.RedisError, VTRRError) as error:
            log.warning("%s %s: failed: %s", writer, what, error)
            if isinstance(error, VTRRError):
                raise BadInput(describe(error)) from error
            raise
        log.info("%s %s: %s", writer, what, result)
        if not web.fragment(request):
            return RedirectResponse(local_path(form.get("next", "/")), status_code=303)
        response = web.render(request, "_flash.html", message=f"{message}: {result}")
        response.headers["HX-Trigger"] = "vtrr-changed"
        return response

    return act
