"""The module's errors as exceptions.

Every reply error of a vtrr command becomes one of these, raised by the
client; the message is the server's, without its code.
"""

from __future__ import annotations

import re

import redis.exceptions

from .types import decode


class VTRRError(Exception):
    """Base class of every error this package raises."""


class InvalidArgument(VTRRError, ValueError):
    """An argument was refused (`ERR ...` from the server, or the same check made before sending): nothing was changed."""


class WrongType(VTRRError):
    """A key of the queue holds another type (`WRONGTYPE ...`)."""


class NoPermission(VTRRError):
    """The ACL user may not touch a key of this queue (`NOPERM ...`)."""


class ModuleNotLoaded(VTRRError):
    """The server does not know the vtrr commands: the module is not loaded.

    Its message names the server and how to load the module there.
    """


class SlotMoving(VTRRError):
    """The queue's cluster slot kept moving (TRYAGAIN) past the retry deadline."""


class SerializationError(VTRRError, TypeError):
    """A task's arguments cannot be serialised: nothing was enqueued."""


# The server's FULL message, after its code. Matched whole (`fullmatch`): a
# partition is any bytes, so it may hold this very text, but only the real
# tail, the last, reaches the end of the message.
_FULL = re.compile(
    r"partition '(?P<partition>.*)' has (?P<waiting>\d+) items waiting and MAX-QUEUED"
    r" (?P<max_queued>\d+): the call would add (?P<adds>\d+); nothing was enqueued",
    re.DOTALL,
)
# How the module quotes bytes in a message (src/text.rs, `Quoted`): printable
# ASCII but the backslash, or one of its escapes.
_QUOTED = re.compile(r"(?:[ -\[\]-~]|\\(?:x[0-9a-f]{2}|[\\nrt]))*")


class PartitionFull(VTRRError):
    """An enqueue or defer would take a partition past its MAX-QUEUED (`FULL ...`):
    nothing of the call was enqueued, the items of other partitions included.

    Backpressure, not a mistake (so not an `InvalidArgument`, and no reason
    for a worker to stop): the same call succeeds once the partition has
    fewer items waiting, so shed the work, slow down or retry later.
    `partition` (decoded as the client decodes partitions), `waiting` (its
    items queued or delayed), `max_queued` (the limit in force) and `adds`
    (what the call would have added to it) are read from the server's
    message; None when it does not read as this module's.
    """

    partition: str | None = None
    waiting: int | None = None
    max_queued: int | None = None
    adds: int | None = None

    def __init__(self, message: str) -> None:
        super().__init__(message)
        found = _FULL.fullmatch(message)
        if found is None or not _QUOTED.fullmatch(found["partition"]):
            return
        self.partition = decode(_unquoted(found["partition"]))
        self.waiting, self.max_queued, self.adds = (
            int(found[name]) for name in ("waiting", "max_queued", "adds")
        )


def _unquoted(quoted: str) -> bytes:
    """The bytes the module quoted as `quoted`: its escapes (`\\\\`, `\\n`, `\\r`,
    `\\t`, `\\xNN`) are Python's too, which `unicode_escape` reads back to code
    points 0-255, each the byte it was."""
    return quoted.encode("ascii").decode("unicode_escape").encode("latin-1")


def translate(error: redis.exceptions.ResponseError, server: str) -> VTRRError:
    """The exception for a reply error of `server` (as `client.server_of` names it)."""
    message = str(error)
    if isinstance(error, redis.exceptions.NoPermissionError) or message.startswith("NOPERM"):
        return NoPermission(message.removeprefix("NOPERM ").strip())
    if message.startswith("FULL "):
        return PartitionFull(message.removeprefix("FULL "))
    if message.startswith("WRONGTYPE"):
        return WrongType(message.removeprefix("WRONGTYPE ").strip())
    if message.startswith("unknown command") and "VTRR." in message.upper():
        return ModuleNotLoaded(
            f"the vtrr module is not loaded on {server}: add `loadmodule /path/to/libvtrr.so`"
            " to its configuration (docs/operations.md, Loading the module)"
        )
    return InvalidArgument(message)
