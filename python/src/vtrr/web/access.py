"""Who may write: read-only unless the app was given a write token.

A script writes with the token as `Authorization: Bearer <token>`. A browser
logs in with it (`/login`) and gets a session: a random id in a cookie
(`HttpOnly`, `SameSite=Strict`, `Max-Age`), kept in this process's memory,
which ends when it expires, at logout or when the process restarts. A
session's writes also carry its CSRF token: a hidden field of every form,
and the `X-CSRF-Token` header of every htmx request.

`SameSite` alone does not stop a page of the same site (another port of
this host) from posting a form with the cookie, so every POST whose
`Origin` (or, without one, `Referer`) is not this view's own is refused
(`Guard`); a request from no page at all (a script: neither header) passes.
Every try of the token, at the login form or as a bearer, is throttled per
client address (`Throttle`) and a wrong one is logged at WARNING; a try
refused by the throttle (429) is not: the wrong ones before it were.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import hmac
import logging
import math
import secrets
import time
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from ..types import encode
from .names import parsed_form

log = logging.getLogger("vtrr.web")

COOKIE = "vtrr_web"
CSRF_FIELD = "csrf"
CSRF_HEADER = "X-CSRF-Token"
SESSION_S = 12 * 3600  # a session's life, by default: a working day
# Set on the request's scope by `Guard` when it carried the right bearer token.
_BEARER = "vtrr.bearer"


class Refused(Exception):
    """A write this request may not make: a 403 saying why."""


class TooManyTries(Exception):
    """An address that tried the token too often: a 429, to try again in `retry_after_s`."""

    def __init__(self, retry_after_s: int) -> None:
        super().__init__(f"too many tries of the write token: try again in {retry_after_s} s")
        self.retry_after_s = retry_after_s


def address(request: Request) -> str:
    """The client's address (behind a proxy uvicorn trusts, from X-Forwarded-For)."""
    return request.client.host if request.client else "?"


def refusal(request: Request, reason: str) -> Response:
    """A refused request, logged at WARNING: a one-line 403 (htmx shows it in the flash)."""
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    log.warning("refused %s %s from %s: %s", request.method, target, address(request), reason)
    return PlainTextResponse(f"403: {reason}\n", 403)


def _digest(secret: str) -> bytes:
    # Compared as digests: equal lengths, in constant time, whatever was sent.
    return hashlib.sha256(encode(secret)).digest()


def _session_key(request: Request) -> bytes:
    return _digest(request.cookies.get(COOKIE, ""))


class Throttle:
    """Tries of the write token, per client address: a bucket of `BURST` tries, refilled one
    per `INTERVAL_S`. A try past the burst waits its turn (asyncio.sleep: every other request
    goes on meanwhile); one that would wait over `MAX_WAIT_S` is refused at once. The right
    token forgets the address. At most `MAX_ADDRESSES` are kept, the least recent dropped."""

    BURST = 5
    INTERVAL_S = 1.0
    MAX_WAIT_S = 5.0
    MAX_ADDRESSES = 10_000

    def __init__(self) -> None:
        # address: (tries left, at when), least recently tried first. Tries left goes
        # below 0 while tries wait their turn: each waiter has taken its own.
        self._buckets: dict[str, tuple[float, float]] = {}

    async def admit(self, address: str) -> None:
        """Return when the address may try; TooManyTries when it would wait too long."""
        now = time.monotonic()
        left, at = self._buckets.pop(address, (self.BURST, now))
        left = min(self.BURST, left + (now - at) / self.INTERVAL_S)
        wait_s = max(0.0, (1 - left) * self.INTERVAL_S)
        if wait_s > self.MAX_WAIT_S:
            self._buckets[address] = (left, now)
            raise TooManyTries(math.ceil(wait_s))
        self._buckets[address] = (left - 1, now)
        while len(self._buckets) > self.MAX_ADDRESSES:
            del self._buckets[next(iter(self._buckets))]
        if wait_s:
            await asyncio.sleep(wait_s)

    def forget(self, address: str) -> None:
        self._buckets.pop(address, None)


@dataclasses.dataclass(frozen=True, slots=True)
class Session:
    csrf: str
    expires_at: float  # time.monotonic()


class Access:
    """The write token, the live sessions and the throttle of one app."""

    MAX_SESSIONS = 1000  # past it a login ends the oldest session

    def __init__(self, write_token: str | None, session_s: float) -> None:
        if write_token == "":
            raise ValueError("write_token must not be empty (None: read-only)")
        if session_s <= 0:
            raise ValueError("session_s must be positive")
        self._token = None if write_token is None else _digest(write_token)
        self.session_s = session_s
        # By the digest of the session id (a lookup's timing tells nothing of an id),
        # oldest first.
        self._sessions: dict[bytes, Session] = {}
        self.throttle = Throttle()

    @property
    def writable(self) -> bool:
        """Whether this app takes writes at all (it was given a token)."""
        return self._token is not None

    async def try_token(self, request: Request, candidate: str, how: str) -> bool:
        """Whether `candidate` is the write token: throttled per address (TooManyTries),
        and a wrong one logged."""
        assert self._token is not None, "no write token: nothing to try"
        where = address(request)
        await self.throttle.admit(where)
        if hmac.compare_digest(_digest(candidate), self._token):
            self.throttle.forget(where)
            return True
        log.warning("wrong write token (%s) from %s", how, where)
        return False

    def log_in(self, request: Request) -> str:
        """A new session for the request (its token was right): the id its cookie holds."""
        now = time.monotonic()
        for key in [k for k, s in self._sessions.items() if s.expires_at <= now]:
            del self._sessions[key]
        while len(self._sessions) >= self.MAX_SESSIONS:
            del self._sessions[next(iter(self._sessions))]
        session_id = secrets.token_urlsafe(32)
        self._sessions[_digest(session_id)] = Session(
            secrets.token_urlsafe(32), now + self.session_s
        )
        log.info("cookie@%s logged in", address(request))
        return session_id

    def session(self, request: Request) -> Session | None:
        """The request's live session (by its cookie), if any."""
        key = _session_key(request)
        session = self._sessions.get(key)
        if session is not None and session.expires_at <= time.monotonic():
            del self._sessions[key]
            return None
        return session

    def writer(self, request: Request) -> str | None:
        """Who the request writes as ("bearer@host", "cookie@host"), or None: it may not.
        For what a page shows; a POST is `authorize`d."""
        if request.scope.get(_BEARER):
            return f"bearer@{address(request)}"
        if self.session(request) is not None:
            return f"cookie@{address(request)}"
        return None

    async def authorize(self, request: Request) -> tuple[str, dict[str, str]]:
        """Who a POST writes as, and its form; Refused when it may not (a session's needs
        its CSRF token). The body is read only once the request may be a writer's."""
        if not self.writable:
            raise Refused("this view is read-only")
        if request.scope.get(_BEARER):
            return f"bearer@{address(request)}", parsed_form(await request.body())
        session = self.session(request)
        if session is None:
            raise Refused("log in to write")
        form = parsed_form(await request.body())
        _check_csrf(session, request, form)
        return f"cookie@{address(request)}", form

    async def log_out(self, request: Request) -> None:
        """End the request's session, if it has a live one (and its CSRF token)."""
        session = self.session(request)
        if session is not None:
            _check_csrf(session, request, parsed_form(await request.body()))
            del self._sessions[_session_key(request)]
            log.info("cookie@%s logged out", address(request))


def _check_csrf(session: Session, request: Request, form: dict[str, str]) -> None:
    given = request.headers.get(CSRF_HEADER) or form.get(CSRF_FIELD, "")
    if not hmac.compare_digest(_digest(given), _digest(session.csrf)):
        raise Refused("the form's CSRF token is missing or stale: reload the page")


def _origin(url: str) -> tuple[str, str, int] | None:
    """A URL's origin (scheme, host, port), None if it has none (`null`, a bad port)."""
    try:
        parts = urlsplit(url)
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme.lower(), 0)
    except ValueError:
        return None
    if not parts.scheme or not parts.hostname:
        return None
    return parts.scheme.lower(), parts.hostname.lower(), port


class Guard:
    """ASGI middleware before every route: a POST from another origin is refused, and a
    bearer token is tried (throttled); the right one is marked on the request's scope."""

    def __init__(self, app: ASGIApp, access: Access) -> None:
        self.app = app
        self.access = access

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            request = Request(scope)
            refused = await self._refused(request)
            if refused is not None:
                await refused(scope, receive, send)
                return
        await self.app(scope, receive, send)

    async def _refused(self, request: Request) -> Response | None:
        if request.method == "POST":
            origin = request.headers.get("origin")
            source = origin if origin is not None else request.headers.get("referer")
            if source is not None and _origin(source) != _origin(str(request.base_url)):
                return refusal(request, f"it comes from another origin ({source[:100]!r})")
        scheme, _, credential = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not self.access.writable:
            return None
        try:
            right = await self.access.try_token(request, credential.strip(), "bearer")
        except TooManyTries as error:
            headers = {"Retry-After": str(error.retry_after_s)}
            return PlainTextResponse(f"429: {error}\n", 429, headers=headers)
        if not right:
            return PlainTextResponse("403: that is not the write token\n", 403)
        request.scope[_BEARER] = True
        return None
