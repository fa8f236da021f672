"""The local master key: the :class:`~events.sealing.ports.KeyWrapper` when no KMS is set.

Where it is: ``CONVLOG_MASTER_KEY`` (base64 of 32 bytes; several, comma-separated, the first
the current one, the others earlier ones still needed to unwrap), else the file
``DATA_DIR/master.key``, created with mode 0600 on first use. A file that others can read is
refused: whoever reads it can unwrap every user key (docs/erasure.md, Backups).

It holds the current KEK and earlier ones: :meth:`LocalMasterKey.rotate` adds a new current
one, and the earlier ones stay until every user key is rewrapped under it
(``convlog keys rotate``, :meth:`LocalMasterKey.retire`). A KEK's id is ``local:`` and the
first 16 hex digits of its SHA-256: not secret, it only says which KEK a user key needs.

A wrap is AES-256-GCM under the KEK: the 12-byte nonce, then the ciphertext and its tag.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import stat
from collections.abc import Collection
from pathlib import Path
from typing import Final

from events.durable import fsync_directory
from events.errors import ConfigurationError, KeyStoreError, SealedRecordError
from events.sealing.envelope import NONCE_BYTES, open_bytes, seal_bytes
from events.sealing.keys import KEY_BYTES, new_secret

__all__ = ["MASTER_KEY_FILE", "LocalMasterKey", "MissingMasterKey", "kek_id_of"]

MASTER_KEY_FILE: Final = "master.key"
FORMAT: Final = "convlog-master-key-v1"


def kek_id_of(kek: bytes) -> str:
    return "local:" + hashlib.sha256(kek).hexdigest()[:16]


class LocalMasterKey:
    """KEKs by id, one of them current. Open it with :meth:`from_setting` or :meth:`open`."""

    def __init__(self, keks: dict[str, bytes], current: str, *, path: Path | None = None) -> None:
        assert current in keks, "the current KEK is one of the KEKs"
        self._keks = dict(keks)
        self._current = current
        self._path = path
        self._seen = _stat(path) if path is not None else None

    @classmethod
    def from_setting(cls, value: str) -> LocalMasterKey:
        """``CONVLOG_MASTER_KEY``: base64 of 32 bytes, or several comma-separated (current first)."""
        keks = [_decode_kek(part.strip()) for part in value.split(",") if part.strip()]
        if not keks:
            raise ConfigurationError("CONVLOG_MASTER_KEY is empty: base64 of 32 bytes expected")
        return cls({kek_id_of(k): k for k in keks}, kek_id_of(keks[0]))

    @classmethod
    def open(cls, path: Path, *, create: bool = True) -> LocalMasterKey:
        """The master key file at ``path``, created (mode 0600) when missing and ``create``."""
        if not path.exists():
            if not create:
                raise ConfigurationError(
                    f"no master key at {path}: without it no sealed content can be opened (docs/erasure.md, Backups)"
                )
            kek = new_secret()
            _write(path, {kek_id_of(kek): kek}, kek_id_of(kek), exclusive=True)
        keks, current = _read(path)
        return cls(keks, current, path=path)

    @property
    def kek_id(self) -> str:
        self._reload_if_changed()  # another process (``convlog keys rotate``) may have rotated
        return self._current

    @property
    def kek_ids(self) -> tuple[str, ...]:
        return tuple(self._keks)

    async def wrap(self, secret: bytes, *, associated_data: bytes) -> bytes:
        self._reload_if_changed()
        nonce, sealed = seal_bytes(self._keks[self._current], secret, associated_data)
        return nonce + sealed

    async def unwrap(self, wrapped: bytes, *, kek_id: str, associated_data: bytes) -> bytes:
        if kek_id not in self._keks:
            self._reload_if_changed()
        kek = self._keks.get(kek_id)
        if kek is None:
            raise KeyStoreError(f"the master key holds no KEK {kek_id} (held: {', '.join(self._keks)})")
        try:
            return open_bytes(kek, wrapped[:NONCE_BYTES], wrapped[NONCE_BYTES:], associated_data)
        except SealedRecordError as e:
            raise KeyStoreError(f"a key wrapped by {kek_id} fails authentication: altered or moved") from e

    def rotate(self) -> str:
        """Add a new current KEK (the earlier ones stay, to unwrap) and return its id."""
        path = self._writable_path()
        kek = new_secret()
        self._keks[kek_id_of(kek)] = kek
        self._current = kek_id_of(kek)
        _write(path, self._keks, self._current)
        self._seen = _stat(path)
        return self._current

    def retire(self, in_use: Collection[str]) -> tuple[str, ...]:
        """Drop the earlier KEKs that no user key in ``in_use`` (KEK ids) still needs."""
        path = self._writable_path()
        retired = tuple(k for k in self._keks if k != self._current and k not in in_use)
        for kek_id in retired:
            del self._keks[kek_id]
        if retired:
            _write(path, self._keks, self._current)
            self._seen = _stat(path)
        return retired

    def _writable_path(self) -> Path:
        if self._path is None:
            raise ConfigurationError(
                "the master key comes from CONVLOG_MASTER_KEY: put a new key first in it, keep the earlier ones "
                "after it, and run `convlog keys rotate` to rewrap"
            )
        return self._path

    def _reload_if_changed(self) -> None:
        if self._path is not None and _stat(self._path) != self._seen:
            self._keks, self._current = _read(self._path)
            self._seen = _stat(self._path)


class MissingMasterKey:
    """What a read-only command (``convlog keys list``) uses when there is no master key file:
    a key store without keys needs none, and one with keys fails to load them with an error
    that names the disaster instead of creating a new, useless master key."""

    def __init__(self, path: Path) -> None:
        self._path = path

    @property
    def kek_id(self) -> str:
        return "local:none"

    async def wrap(self, secret: bytes, *, associated_data: bytes) -> bytes:  # noqa: ARG002 - the port's signature
        raise KeyStoreError(f"no master key at {self._path}: opened read-only, nothing is wrapped")

    async def unwrap(self, wrapped: bytes, *, kek_id: str, associated_data: bytes) -> bytes:  # noqa: ARG002
        raise KeyStoreError(
            f"a user key is wrapped by {kek_id}, and there is no master key at {self._path}: restore it from its "
            "backup, or no sealed content can be opened (docs/erasure.md, Backups)"
        )


def _decode_kek(text: str) -> bytes:
    try:
        kek = base64.b64decode(text, validate=True)
    except binascii.Error as e:
        raise ConfigurationError(f"CONVLOG_MASTER_KEY: not base64 ({e})") from e
    if len(kek) != KEY_BYTES:
        raise ConfigurationError(f"CONVLOG_MASTER_KEY: a key is {KEY_BYTES} bytes, got {len(kek)}")
    return kek


def _stat(path: Path) -> tuple[int, int, int] | None:
    try:
        s = path.stat()
    except FileNotFoundError:
        return None
    return (s.st_ino, s.st_size, s.st_mtime_ns)


def _read(path: Path) -> tuple[dict[str, bytes], str]:
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        raise ConfigurationError(
            f"{path} has mode {mode:04o}: others can read the master key; `chmod 600 {path}` (and check who read it)"
        )
    try:
        document = json.loads(path.read_bytes())
        keks = {kek_id_of(k): k for k in (_decode_kek(v) for v in document["keys"])}
        current = str(document["current"])
    except (ValueError, KeyError, TypeError) as e:
        raise ConfigurationError(f"{path} is not a convlog master key file: {e}") from e
    if document.get("format") != FORMAT or current not in keks:
        raise ConfigurationError(f"{path} is not a convlog master key file (format, or its current KEK missing)")
    return keks, current


def _write(path: Path, keks: dict[str, bytes], current: str, *, exclusive: bool = False) -> None:
    """Write the file whole (a new file renamed over the old, both fsynced), mode 0600."""
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "format": FORMAT,
        "current": current,
        "keys": [base64.b64encode(k).decode("ascii") for k in keks.values()],
    }
    temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    with os.fdopen(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as out:
        os.fchmod(out.fileno(), 0o600)
        out.write(json.dumps(document, indent=1).encode("utf-8"))
        out.flush()
        os.fsync(out.fileno())
    if exclusive:
        try:
            os.link(temporary, path)  # fails if another process created it first: theirs is the one
        except FileExistsError:
            pass
        finally:
            temporary.unlink()
    else:
        temporary.replace(path)
    fsync_directory(path.parent)
