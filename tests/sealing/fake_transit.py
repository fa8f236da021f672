"""An in-process fake of Vault's transit secrets engine, as a :class:`KeyWrapper`: what a KMS
adapter looks like (docs/erasure.md, The KMS seam), run by the wrapper and key store suites.

Like transit: a named key with numbered versions, ciphertexts ``vault:v<N>:<base64>`` naming
the version that made them, ``rotate`` adding a version that new wraps use, and
``min_decryption_version`` retiring the older ones. The KEK id names the key and the version
new wraps use (``vault-transit:<name>:v<N>``); unwrapping reads the version from the
ciphertext, as transit's ``decrypt`` does.
"""

from __future__ import annotations

import base64
import binascii
import re

from events.errors import KeyStoreError, SealedRecordError
from events.sealing.envelope import NONCE_BYTES, open_bytes, seal_bytes
from events.sealing.keys import new_secret

_CIPHERTEXT = re.compile(rb"^vault:v(\d+):([A-Za-z0-9+/=]+)$")


class FakeTransit:
    def __init__(self, name: str = "convlog") -> None:
        self.name = name
        self._versions = {1: new_secret()}
        self.min_decryption_version = 1
        self.calls = 0  # network round trips a real transit would take

    @property
    def latest_version(self) -> int:
        return max(self._versions)

    @property
    def kek_id(self) -> str:
        return f"vault-transit:{self.name}:v{self.latest_version}"

    def rotate(self) -> None:
        """``vault write -f transit/keys/<name>/rotate``."""
        self._versions[self.latest_version + 1] = new_secret()

    def trim(self) -> None:
        """``min_decryption_version`` = the latest: older ciphertexts no longer decrypt."""
        self.min_decryption_version = self.latest_version

    async def wrap(self, secret: bytes, *, associated_data: bytes) -> bytes:
        self.calls += 1
        version = self.latest_version
        nonce, sealed = seal_bytes(self._versions[version], secret, associated_data)
        return b"vault:v%d:" % version + base64.b64encode(nonce + sealed)

    async def unwrap(self, wrapped: bytes, *, kek_id: str, associated_data: bytes) -> bytes:
        self.calls += 1
        if not kek_id.startswith(f"vault-transit:{self.name}:"):
            raise KeyStoreError(f"transit key {self.name} did not wrap for {kek_id}")
        match = _CIPHERTEXT.match(wrapped)
        if match is None:
            raise KeyStoreError("not a transit ciphertext")
        version = int(match[1])
        if version < self.min_decryption_version or version not in self._versions:
            raise KeyStoreError(f"transit key {self.name} no longer decrypts version {version}")
        try:
            raw = base64.b64decode(match[2], validate=True)
            return open_bytes(self._versions[version], raw[:NONCE_BYTES], raw[NONCE_BYTES:], associated_data)
        except (binascii.Error, SealedRecordError) as e:
            raise KeyStoreError(f"transit decrypt failed: {e}") from e


def transit_factory(settings: object) -> FakeTransit:
    """What ``CONVLOG_KEK_FACTORY=tests.sealing.fake_transit:transit_factory`` calls."""
    return FakeTransit()
