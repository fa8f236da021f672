"""The embedded default :class:`~events.sealing.ports.KeyRecordLog`: one file beside the
embedded log (``DATA_DIR/log/<topic>.keys``) holding only the latest record of each key.

* A :meth:`~FileKeyRecordLog.put` rewrites the whole file atomically — a new file fsynced,
  renamed over the old one, the directory fsynced (:mod:`events.durable`) — so a destroyed
  key's wrapped bytes are gone from the file the moment the erase answers. (The file system
  may keep freed blocks until they are reused: docs/erasure.md says what that means.)
* Writers take an exclusive ``fcntl`` lock on ``<file>.lock`` around read-merge-write, and
  merge into what is on disk then, so ``convlog erase`` can run beside ``convlog serve``.
* Readers reload only when the file changed (its inode, size or modification time).

The file is JSON: ``{"format": "convlog-keys-v1", "records": {key_id: base64 of the record}}``;
the records are the key store's JSON (docs/erasure.md, Key records).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import fcntl
import json
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Final

from events.durable import fsync_directory
from events.errors import KeyStoreError, KeyStoreUnavailableError
from events.sealing.ports import KeyRecord

__all__ = ["FileKeyRecordLog"]

FORMAT: Final = "convlog-keys-v1"


class FileKeyRecordLog:
    """The keys file at ``path``. ``read_only``: never creates or writes it (``convlog keys list``)."""

    def __init__(self, path: Path, *, read_only: bool = False) -> None:
        self._path = path
        self._read_only = read_only
        self._seen: tuple[int, int, int] | None = None  # (inode, size, mtime_ns) of what _latest holds
        self._latest: dict[str, bytes] = {}
        self._lock = asyncio.Lock()  # one worker thread at a time touches _latest and _seen

    @property
    def path(self) -> Path:
        return self._path

    async def load(self) -> Iterable[KeyRecord]:
        async with self._lock:
            await asyncio.to_thread(self._reload)
        return [KeyRecord(key_id, value) for key_id, value in self._latest.items()]

    async def put(self, records: Sequence[KeyRecord]) -> None:
        if self._read_only:
            raise KeyStoreError(f"{self._path} is open read-only")
        if records:
            async with self._lock:
                await asyncio.to_thread(self._put, records)

    async def close(self) -> None:
        self._latest = {}

    def _reload(self) -> None:
        try:
            stat = self._path.stat()
        except FileNotFoundError:
            self._seen, self._latest = None, {}
            return
        except OSError as e:
            raise KeyStoreUnavailableError(f"reading {self._path}: {e}") from e
        seen = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
        if seen != self._seen:
            self._latest, self._seen = _read(self._path), seen

    def _put(self, records: Sequence[KeyRecord]) -> None:
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            with _locked(self._path.with_name(self._path.name + ".lock")):
                self._reload()  # what other writers put since this one last looked
                merged = {**self._latest, **{r.key_id: r.value for r in records}}
                _write(self._path, merged)
                self._latest = merged
                stat = self._path.stat()
                self._seen = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
        except OSError as e:
            raise KeyStoreUnavailableError(f"writing {self._path}: {e}") from e


@contextlib.contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # blocks this worker thread only (asyncio.to_thread)
        yield
    finally:
        os.close(fd)  # releases the lock


def _read(path: Path) -> dict[str, bytes]:
    try:
        document = json.loads(path.read_bytes())
        return _records_of(document)
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise KeyStoreUnavailableError(f"reading {path}: {e}") from e
    except (ValueError, KeyError, TypeError, AttributeError, binascii.Error) as e:
        raise KeyStoreError(f"{path} is not a convlog keys file: {e}") from e


def _records_of(document: dict[str, object]) -> dict[str, bytes]:
    if document.get("format") != FORMAT:
        raise ValueError(f"format {document.get('format')!r}, expected {FORMAT!r}")
    records = document["records"]
    if not isinstance(records, dict):
        raise TypeError("records is not an object")
    return {str(k): base64.b64decode(v, validate=True) for k, v in records.items()}


def _write(path: Path, records: dict[str, bytes]) -> None:
    document = {"format": FORMAT, "records": {k: base64.b64encode(v).decode("ascii") for k, v in records.items()}}
    temporary = path.with_name(path.name + ".tmp")
    with os.fdopen(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as out:
        out.write(json.dumps(document, indent=1).encode("utf-8"))
        out.flush()
        os.fsync(out.fileno())
    temporary.replace(path)
    fsync_directory(path.parent)
