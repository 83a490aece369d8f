"""Queue and tenant names as they travel: in URLs, in HTML, in log lines.

A name is any bytes. The client hands them over as `str` with the bytes that
are not UTF-8 kept as surrogates (`vtrr.types.decode`); such a string cannot
be written to an HTML page or a log as is. In a URL a name is its bytes
percent-encoded, always in the query string (a `/` in a path would be
routed), and read back with the same surrogates.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, quote_from_bytes

from ..types import encode

_SURROGATES = range(0xDC80, 0xDD00)


def shown(name: str) -> str:
    """The name to show: a byte that is not UTF-8 as `\\xNN`, an unprintable character as
    `\\uNNNN` (a newline in a tenant name must not break a line of the page or the log)."""
    if name.isprintable():
        return name
    out = []
    for char in name:
        code = ord(char)
        if code in _SURROGATES:
            out.append(f"\\x{code - 0xDC00:02x}")
        elif not char.isprintable():
            out.append(f"\\u{code:04x}")
        else:
            out.append(char)
    return "".join(out)


def is_text(value: str) -> bool:
    """Whether a decoded value is UTF-8 text: it holds no byte kept as a surrogate."""
    return not any(ord(char) in _SURROGATES for char in value)


def quoted(name: str) -> str:
    """The name percent-encoded for a query string (every byte it came from)."""
    return quote_from_bytes(encode(name), safe="")


def parsed_form(raw: bytes) -> dict[str, str]:
    """A query string or urlencoded body as a dict, its names decoded as the client decodes
    them (surrogates for bytes that are not UTF-8); the last value of a key wins."""
    return dict(
        parse_qsl(
            raw.decode("latin-1"),
            keep_blank_values=True,
            encoding="utf-8",
            errors="surrogateescape",
        )
    )
