"""The module's argument bounds (docs/commands.md), for checks made before a call.

The server refuses out-of-range arguments itself, changing nothing; these
let the package refuse them first where one user call becomes several
server calls (a sharded enqueue, a framework's enqueue with its records)
or where a refusal would come too late (a worker's NACK after the handler
ran).
"""

from __future__ import annotations

from typing import Final

from .errors import InvalidArgument
from .types import Item, encode

MAX_WEIGHT: Final = 1_000_000_000
MAX_COST: Final = 1_000_000_000
MAX_PRIORITY: Final = 100
"""A reported cost (VTRR.ACKCOST), in the weights' units."""
MAX_MS: Final = 315_360_000_000
"""lease-ms and delay-ms: ten years."""
MAX_BLOCK_MS: Final = 31_536_000_000
"""BLOCK timeout-ms: one year."""
MAX_REASON_BYTES: Final = 4096
"""NACK ... REASON: what failed, in bytes."""
MAX_RESULT_BYTES: Final = 1_048_576
"""VTRR.ACKRESULT: what a job returned, in bytes."""


def check_int(name: str, value: object, low: int, high: int) -> int:
    """`value` as an int in [low, high]: else TypeError, or InvalidArgument (a ValueError) worded as the server's."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if not low <= value <= high:
        raise InvalidArgument(f"{name} must be an integer between {low} and {high}")
    return value


def check_item(item: Item) -> Item:
    """An item the server would accept (types, a non-empty id, the weight's range)."""
    for name in ("partition", "id"):
        if not isinstance(getattr(item, name), str | bytes):
            raise TypeError(
                f"{name} must be str or bytes, not {type(getattr(item, name)).__name__}"
            )
    if not item.id:
        raise InvalidArgument("id must not be empty")
    if not isinstance(item.payload, bytes | str):
        raise TypeError(f"payload must be bytes or str, not {type(item.payload).__name__}")
    check_int("weight", item.weight, 1, MAX_WEIGHT)
    return item


def check_reason(reason: object) -> bytes:
    """A NACK's `reason` as the bytes sent (a str as UTF-8): 1 to MAX_REASON_BYTES of them."""
    if not isinstance(reason, str | bytes):
        raise TypeError(f"reason must be str or bytes, not {type(reason).__name__}")
    sent = encode(reason)
    if not 1 <= len(sent) <= MAX_REASON_BYTES:
        raise InvalidArgument(f"REASON must be between 1 and {MAX_REASON_BYTES} bytes")
    return sent


def check_result(result: object) -> bytes:
    """A job's result as the bytes sent (a str as UTF-8): at most MAX_RESULT_BYTES of them."""
    if not isinstance(result, str | bytes):
        raise TypeError(f"result must be str or bytes, not {type(result).__name__}")
    sent = encode(result)
    if len(sent) > MAX_RESULT_BYTES:
        raise InvalidArgument(f"result must be at most {MAX_RESULT_BYTES} bytes")
    return sent
