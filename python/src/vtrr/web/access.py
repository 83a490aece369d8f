"""Who may write: read-only unless the app was given a write token.

A request writes when it carries the token, as `Authorization: Bearer
<token>` (scripts) or as the cookie the login form sets (browsers). The
cookie holds an HMAC of the token, not the token, and is `SameSite=Strict`:
another site's page cannot make a browser send it with a forged POST.
"""

from __future__ import annotations

import hashlib
import hmac

from starlette.requests import Request

COOKIE = "vtrr_web"


class Access:
    def __init__(self, write_token: str | None) -> None:
        self._token = write_token
        self._cookie = (
            hmac.new(write_token.encode(), b"vtrr-web-session", hashlib.sha256).hexdigest()
            if write_token
            else None
        )

    @property
    def writable(self) -> bool:
        """Whether this app takes writes at all (it was given a token)."""
        return self._token is not None

    def token_is(self, candidate: str) -> bool:
        return self._token is not None and hmac.compare_digest(
            candidate.encode(), self._token.encode()
        )

    @property
    def cookie_value(self) -> str:
        assert self._cookie is not None, "no write token: nothing to log in to"
        return self._cookie

    def writer(self, request: Request) -> str | None:
        """Who the request writes as ("bearer@host", "cookie@host"), or None: it may not."""
        if self._token is None:
            return None
        host = request.client.host if request.client else "?"
        scheme, _, credential = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and self.token_is(credential.strip()):
            return f"bearer@{host}"
        cookie = request.cookies.get(COOKIE, "")
        if self._cookie and hmac.compare_digest(cookie.encode(), self._cookie.encode()):
            return f"cookie@{host}"
        return None
