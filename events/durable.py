"""Making a rename durable: the file's bytes and the directory entry both reach the disk."""

from __future__ import annotations

import os
from pathlib import Path


def fsync_directory(directory: Path) -> None:
    """fsync ``directory`` itself, so a rename or a new file in it survives a crash (the file's
    own fsync does not cover its directory entry)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
