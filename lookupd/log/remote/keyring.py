"""The RSA private keys that unwrap segment data keys, by key id, loaded once from their PEM files."""

from __future__ import annotations

import math
import threading

from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from ...errors import CorruptDataError, Unavailable
from . import oaep
from .manifest import Encryption

AES_KEY_BYTES = 32  # the plugin's data keys are AES-256


class Keyring:
    """key id -> PEM private key file (`[remote.encryption.keys]`); unwraps a manifest's data key."""

    def __init__(self, key_files: dict[str, str]):
        self._files = dict(key_files)
        self._keys: dict[str, oaep.UnwrappingKey] = {}
        self._lock = threading.Lock()

    def _key(self, key_id: str, object_key: str) -> oaep.UnwrappingKey:
        with self._lock:
            key = self._keys.get(key_id)
            if key is not None:
                return key
            path = self._files.get(key_id)
            if path is None:
                raise CorruptDataError(object_key, None, f"data key wrapped with key id {key_id!r}, which is not "
                                       "in [remote.encryption.keys]: add its PEM private key file there")
            try:
                with open(path, "rb") as f:
                    # OpenSSL's key check tests p and q for primality: 40 ms and more of CPU with the GIL
                    # held, per process. The key only ever feeds oaep.py's RSA (pycryptodome's and the
                    # Python reference, never OpenSSL's), so _consistent's cheap check of the numbers
                    # they use stands in for it.
                    key = load_pem_private_key(f.read(), password=None, unsafe_skip_rsa_key_validation=True)
            except OSError as e:
                raise Unavailable(f"cannot read the private key file {path} of key id {key_id!r}: "
                                  f"{e.strerror}") from None
            except (ValueError, TypeError) as e:
                raise Unavailable(f"{path} (key id {key_id!r}) is not an unencrypted PEM private key: "
                                  f"{e}") from None
            if not isinstance(key, RSAPrivateKey):
                raise Unavailable(f"{path} (key id {key_id!r}) is not an RSA private key")
            if not _consistent(key):
                raise Unavailable(f"{path} (key id {key_id!r}) is not a valid RSA private key: its numbers "
                                  "disagree (a damaged file?); export the key pair again")
            try:
                unwrapping = oaep.UnwrappingKey(key)
            except ValueError as e:  # pycryptodome's bounds (a modulus over 16384 bits)
                raise Unavailable(f"{path} (key id {key_id!r}) is not a usable RSA private key: {e}") from None
            self._keys[key_id] = unwrapping
            return unwrapping

    def unwrap(self, enc: Encryption, object_key: str) -> bytes:
        """The AES-256 data key of a segment; CorruptDataError naming the manifest's key when it fails."""
        key = self._key(enc.key_id, object_key)
        try:
            data_key = key.decrypt(enc.wrapped_key)
        except oaep.DecryptionError as e:
            raise CorruptDataError(object_key, None, f"encryption.dataKey ({enc.key_id}): {e}") from None
        if len(data_key) != AES_KEY_BYTES:
            raise CorruptDataError(object_key, None, f"encryption.dataKey unwraps to {len(data_key)} bytes, "
                                   f"not an AES-256 key")
        return data_key


def _consistent(key: RSAPrivateKey) -> bool:
    """Whether the private numbers oaep.py computes with agree: n = pq, and d, its CRT exponents and the
    CRT coefficient invert e and q as they must (no primality test: that is the slow part of OpenSSL's)."""
    priv = key.private_numbers()
    p, q, d = priv.p, priv.q, priv.d
    n, e = priv.public_numbers.n, priv.public_numbers.e
    lam = (p - 1) * (q - 1) // math.gcd(p - 1, q - 1)
    return (p > 1 and q > 1 and p * q == n and d * e % lam == 1 and priv.dmp1 == d % (p - 1)
            and priv.dmq1 == d % (q - 1) and priv.iqmp * q % p == 1)
