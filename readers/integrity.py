"""When a read checks chunk checksums: the meaning of ``verify="auto" | True | False``.

Bytes that crossed a network are checked by default (a flipped bit in a transfer must never
become a wrong row); bytes of a local memory-mapped file are not, unless asked, because the
file system already guards them and the check would cost more than the read.
"""

from __future__ import annotations

from typing import Literal

from arrowshuffle.format.errors import InvalidOptionError

#: ``"auto"`` (check where bytes travel), ``True`` (always) or ``False`` (never).
Verify = bool | Literal["auto"]


def resolve_verify(verify: Verify, *, remote: bool) -> bool:
    """Whether a read of an object on a remote (``remote=True``) or local store checks CRCs.

    Raises:
        InvalidOptionError: ``verify`` is not ``"auto"``, ``True`` or ``False``.
    """
    if verify == "auto" and isinstance(verify, str):
        return remote
    if isinstance(verify, bool):
        return verify
    raise InvalidOptionError(f"verify must be 'auto', True or False, found {verify!r}")
