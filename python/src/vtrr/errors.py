"""The module's errors as exceptions.

Every reply error of a vtrr command becomes one of these, raised by the
client; the message is the server's, without its code.
"""

from __future__ import annotations

import redis.exceptions


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


def translate(error: redis.exceptions.ResponseError, server: str) -> VTRRError:
    """The exception for a reply error of `server` (as `client.server_of` names it)."""
    message = str(error)
    if isinstance(error, redis.exceptions.NoPermissionError) or message.startswith("NOPERM"):
        return NoPermission(message.removeprefix("NOPERM ").strip())
    if message.startswith("WRONGTYPE"):
        return WrongType(message.removeprefix("WRONGTYPE ").strip())
    if message.startswith("unknown command") and "VTRR." in message.upper():
        return ModuleNotLoaded(
            f"the vtrr module is not loaded on {server}: add `loadmodule /path/to/libvtrr.so`"
            " to its configuration (docs/operations.md, Loading the module)"
        )
    return InvalidArgument(message)
