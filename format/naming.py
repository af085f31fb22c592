"""Every name the format gives to an object: data files, indexes, the manifest, temporaries.

Writers, readers, validation and vacuum all ask this module, so that a name means the same
thing everywhere (spec sections 4, 5, 7 and 8).
"""

from __future__ import annotations

import re
import uuid

from arrowshuffle.format.errors import InvalidOptionError

__all__ = [
    "DATA_SUFFIX",
    "INDEX_SUFFIX",
    "MANIFEST_NAME",
    "PART_PREFIX",
    "VERSIONS_DIR",
    "check_job_id",
    "index_name",
    "is_part_name",
    "new_file_name",
    "new_job_id",
    "temp_name",
    "temp_target",
    "version_from_name",
    "version_name",
]

#: The suffix of a data file a dataset writer names (any name works for a single file).
DATA_SUFFIX = ".arrow"
#: The index sidecar of data file ``d`` is ``d + INDEX_SUFFIX`` (where readers look for it).
INDEX_SUFFIX = ".idx"
#: The manifest of a dataset directory, written last.
MANIFEST_NAME = "_arrowshuffle_manifest.json"
#: The directory of a dataset's manifest versions, one file per commit (spec section 8.1).
VERSIONS_DIR = "_arrowshuffle_versions"
#: Every data file a dataset writer names starts with this.
PART_PREFIX = "part-"

_TEMP = re.compile(r"^\.(?P<target>.+)\.[0-9a-f]{32}\.tmp$")
#: Digits of a version file's number: zero-padded, so names sort as their numbers do.
_VERSION_DIGITS = 20
_VERSION = re.compile(rf"^(?P<number>[0-9]{{{_VERSION_DIGITS}}})\.json$")


def version_name(version: int) -> str:
    """The name of manifest version ``version`` inside :data:`VERSIONS_DIR`."""
    return f"{version:0{_VERSION_DIGITS}d}.json"


def version_from_name(name: str) -> int | None:
    """The version a file of :data:`VERSIONS_DIR` holds by its name, or None for other names."""
    match = _VERSION.match(name)
    return None if match is None else int(match.group("number"))


def index_name(data_name: str) -> str:
    """The name of the index sidecar of the data file ``data_name``."""
    return data_name + INDEX_SUFFIX


def new_job_id() -> str:
    """A random id that names every file of one write job (12 hex digits)."""
    return uuid.uuid4().hex[:12]


def check_job_id(job_id: str) -> str:
    """Return ``job_id`` if it is letters and digits only (it goes into file names)."""
    if not job_id or not all(c.isalnum() for c in job_id):
        raise InvalidOptionError(f"a job id must be letters and digits only, found {job_id!r}")
    return job_id


def new_file_name(task: int, attempt: str | None = None, *, job_id: str | None = None) -> str:
    """A data file name unique to one task attempt.

    ``part-00003-<job_id>-<attempt>.arrow``; without ``job_id``, ``part-00003-<attempt>.arrow``.
    ``attempt`` defaults to a random suffix, so two attempts of one task never collide.
    """
    suffix = attempt or uuid.uuid4().hex
    if job_id is not None:
        suffix = f"{check_job_id(job_id)}-{suffix}"
    return f"{PART_PREFIX}{task:05d}-{suffix}{DATA_SUFFIX}"


def is_part_name(name: str) -> bool:
    """True for a data file or index named the way dataset writers name them."""
    return name.startswith(PART_PREFIX) and name.endswith((DATA_SUFFIX, index_name(DATA_SUFFIX)))


def temp_name(name: str) -> str:
    """A hidden temporary name beside ``name``, unique to one writer: ``.<name>.<32 hex>.tmp``."""
    return f".{name}.{uuid.uuid4().hex}.tmp"


def temp_target(name: str) -> str | None:
    """The name a temporary of :func:`temp_name` stands for, or None if ``name`` is not one."""
    match = _TEMP.match(name)
    return None if match is None else match.group("target")
