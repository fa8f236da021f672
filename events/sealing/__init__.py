"""Crypto-shredding: content sealed under per-subject data keys before it enters the log, so
that erasure is the destruction of a key (docs/erasure.md).

* :mod:`events.sealing.keys` — subjects, data keys, what the key store tells about them;
* :mod:`events.sealing.ports` — the ports: ``KeyRing``, ``KeyStore``, ``KeyRecordLog``, ``KeyWrapper``;
* :mod:`events.sealing.envelope` — AES-256-GCM and the associated data that binds a ciphertext.
"""
