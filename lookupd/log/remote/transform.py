"""The plugin's transforms undone, one class a transform (Aiven's transform/): pure, no I/O and no cache.

A chunk's transformed bytes in, its original bytes out: AES-256-GCM decrypted (12-byte IV in front, the
manifest's AAD), then zstd-decompressed, then checked against the chunk index. Every fault is a
CorruptDataError naming the object and the byte where the chunk (or index) starts.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Callable

import zstandard
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ...errors import CorruptDataError
from .manifest import ChunkIndex, Encryption

IV_BYTES = 12                       # the plugin's AES-GCM IV, written in front of each chunk
TAG_BYTES = 16                      # AES-GCM's 128-bit tag, after the ciphertext


class Decryption:
    """AES-256-GCM with the segment's data key, unwrapped once (`unwrap`: the keyring's RSA-OAEP, milliseconds,
    best started in the background with `start` so that it overlaps the first GETs)."""

    def __init__(self, encryption: Encryption, unwrap: Callable[[], bytes]):
        self.aad = encryption.aad
        self._unwrap = unwrap
        self._key_lock = threading.Lock()
        self._key: Future | None = None  # the AESGCM cipher once the data key is unwrapped

    def start(self, submit: Callable[[Callable[[], AESGCM]], Future]) -> None:
        """Unwrap the data key on another thread (`submit` runs it), before any chunk is asked for."""
        self._key = submit(self._cipher_now)

    def _cipher_now(self) -> AESGCM:
        return AESGCM(self._unwrap())

    def _cipher(self) -> AESGCM:
        """The segment's cipher. A failed unwrap is tried again here, on every use until one succeeds: a key
        file fixed meanwhile is picked up, and each caller gets its own error."""
        key = self._key
        if key is not None and key.exception() is None:
            return key.result()
        with self._key_lock:
            if self._key is None or self._key.exception() is not None:
                done: Future = Future()
                done.set_result(self._cipher_now())
                self._key = done
            return self._key.result()

    def decrypt(self, blob: bytes | memoryview, object_key: str, position: int, what: str) -> bytes:
        if len(blob) < IV_BYTES + TAG_BYTES:
            raise CorruptDataError(object_key, position, f"{what}: {len(blob)} bytes cannot hold an AES-GCM "
                                   f"IV and tag")
        try:
            return self._cipher().decrypt(blob[:IV_BYTES], blob[IV_BYTES:], self.aad)
        except InvalidTag:
            raise CorruptDataError(object_key, position, f"{what}: AES-GCM tag mismatch (corrupt bytes, "
                                   "or a data key that is not this segment's)") from None


class Decompression:
    """zstd, with one decompression context kept per thread; the frame must declare the size the chunk index
    gives, and is never decompressed past it."""

    def __init__(self) -> None:
        self._local = threading.local()

    def decompress(self, blob: bytes | memoryview, size: int, object_key: str, position: int, what: str) -> bytes:
        try:
            declared = zstandard.get_frame_parameters(blob).content_size
        except zstandard.ZstdError as e:
            raise CorruptDataError(object_key, position, f"{what}: not a zstd frame: {e}") from None
        if declared != size:
            raise CorruptDataError(object_key, position, f"{what}: zstd frame declares {declared} bytes, the "
                                   f"chunk index {size}")
        d = getattr(self._local, "d", None)
        if d is None:
            d = self._local.d = zstandard.ZstdDecompressor()
        try:
            return d.decompress(blob, max_output_size=size)
        except zstandard.ZstdError as e:
            raise CorruptDataError(object_key, position, f"{what}: zstd: {e}") from None


class ChunkTransform:
    """The transforms of one uploaded `.log` undone, chunk by chunk, in the plugin's order reversed."""

    def __init__(self, key: str, index: ChunkIndex, decryption: Decryption | None, compressed: bool):
        self.key = key                      # the `.log` object, for errors
        self.index = index
        self.decryption = decryption        # None: not encrypted
        self.decompression = Decompression() if compressed else None

    def decode(self, i: int, blob: memoryview) -> bytes | memoryview:
        """Original bytes of chunk i from its transformed bytes (untransformed: a view of them, no copy)."""
        position = self.index.transformed_start(i)
        start, end = self.index.original_span(i)
        what = f"chunk {i}"
        if self.decryption is not None:
            blob = self.decryption.decrypt(blob, self.key, position, what)
        if self.decompression is not None:
            blob = self.decompression.decompress(blob, end - start, self.key, position, what)
        if len(blob) != end - start:
            raise CorruptDataError(self.key, position, f"{what}: {len(blob)} bytes where the chunk index says "
                                   f"{end - start}")
        return blob
