"""RSA-OAEP decryption with SHA3-512 for the digest and for MGF1 and an empty label (RFC 8017 §7.1.2).

The plugin wraps each segment's AES data key with BouncyCastle's `RSA/NONE/OAEPWithSHA3-512AndMGF1Padding`.
`cryptography` refuses SHA3 in OAEP. The fast path is pycryptodome's PKCS1_OAEP (blinded CRT, the decoding
in constant-time C, its MGF1 on the same SHA3-512): 0.75 ms for a 2048-bit key, 3.9 ms for 4096, where the
Python below takes 6 ms and 40 ms holding the GIL. The Python decoding is the reference path: it runs
within `python_only()` and under LOOKUPD_PURE_PYTHON=1 (lookupd.native, the one switch), and
tests/test_remote_oaep.py checks that both give the same key and the same errors. Every decoding fault
gives the same error, found after the same work (RFC 8017's advice against padding oracles); the length
and range checks come first and are shared, so both paths fail them with the same words.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import secrets

from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey

from ... import native

H_LEN = 64  # SHA3-512's output size
LABEL_HASH = hashlib.sha3_512(b"").digest()  # lHash of the empty label
DECODING_FAILED = "RSA-OAEP (SHA3-512) decoding failed: wrong key or corrupt wrapped key"


class DecryptionError(ValueError):
    """The ciphertext is not an OAEP encoding under this key (wrong key, or corrupt)."""


class UnwrappingKey:
    """An RSA private key (a key-encryption key) ready for both paths: its numbers for the reference,
    and pycryptodome's cipher, built once from the same numbers (no second parse, no primality test)."""

    def __init__(self, key: RSAPrivateKey):
        priv = key.private_numbers()
        self.n, self.e = priv.public_numbers.n, priv.public_numbers.e
        self.p, self.q, self.dmp1, self.dmq1, self.iqmp = priv.p, priv.q, priv.dmp1, priv.dmq1, priv.iqmp
        self.k = (self.n.bit_length() + 7) // 8  # the modulus's length in bytes: every ciphertext's
        self._fast = None if native.PURE_PYTHON else _fast_cipher(self, priv.d)

    def decrypt(self, ciphertext: bytes) -> bytes:
        """RSAES-OAEP-DECRYPT(K, C) with SHA3-512, MGF1-SHA3-512 and an empty label."""
        if len(ciphertext) != self.k or self.k < 2 * H_LEN + 2:
            raise DecryptionError(f"a wrapped key of {len(ciphertext)} bytes does not fit a {self.k * 8}-bit "
                                  "RSA key")
        c = int.from_bytes(ciphertext, "big")
        if c >= self.n:
            raise DecryptionError("the wrapped key is not below the RSA modulus: wrong key or corrupt wrapped key")
        if self._fast is None or native.mode.python:
            return oaep_decode(self._rsa_decrypt_raw(c).to_bytes(self.k, "big"), self.k)
        try:
            return self._fast.decrypt(ciphertext)
        except ValueError:
            raise DecryptionError(DECODING_FAILED) from None

    def _rsa_decrypt_raw(self, c: int) -> int:
        """m = c^d mod n, by the Chinese remainder theorem on the private numbers, blinded (the exponentiation
        runs on c * r^e for a random r, so its timing says nothing about c)."""
        n = self.n
        while True:
            r = secrets.randbelow(n - 2) + 2
            if math.gcd(r, n) == 1:
                break
        blinded = (c * pow(r, self.e, n)) % n
        m1 = pow(blinded, self.dmp1, self.p)
        m2 = pow(blinded, self.dmq1, self.q)
        h = (self.iqmp * (m1 - m2)) % self.p
        return ((m2 + h * self.q) * pow(r, -1, n)) % n


def _fast_cipher(key: UnwrappingKey, d: int):
    """pycryptodome's OAEP decryptor for `key`, from its numbers (imported here: a pure-Python process,
    LOOKUPD_PURE_PYTHON=1, never loads pycryptodome). ValueError if pycryptodome refuses the numbers."""
    from Crypto.Cipher import PKCS1_OAEP
    from Crypto.Hash import SHA3_512
    from Crypto.PublicKey import RSA

    # p and q swapped: pycryptodome's CRT coefficient is p^-1 mod q, the PEM's q^-1 mod p. The numbers were
    # checked by the caller (keyring._consistent), so its own check, a primality test, is skipped.
    rsa_key = RSA.construct((key.n, key.e, d, key.q, key.p, key.iqmp), consistency_check=False)
    return PKCS1_OAEP.new(rsa_key, hashAlgo=SHA3_512)  # MGF1 follows hashAlgo: SHA3-512 for both


def mgf1(seed: bytes, length: int) -> bytes:
    """MGF1 with SHA3-512 (RFC 8017 §B.2.1)."""
    out = bytearray()
    counter = 0
    while len(out) < length:
        out += hashlib.sha3_512(seed + counter.to_bytes(4, "big")).digest()
        counter += 1
    return bytes(out[:length])


def _xor(a: bytes, b: bytes) -> bytes:
    return (int.from_bytes(a, "big") ^ int.from_bytes(b, "big")).to_bytes(len(a), "big")


def oaep_decode(em: bytes, k: int) -> bytes:
    """The message in encoded block `em` (k bytes), or DecryptionError (RFC 8017 §7.1.2 step 3)."""
    masked_seed, masked_db = em[1:1 + H_LEN], em[1 + H_LEN:]
    seed = _xor(masked_seed, mgf1(masked_db, H_LEN))
    db = _xor(masked_db, mgf1(seed, k - H_LEN - 1))
    # Find the 0x01 separator after the zero padding without branching on where it is.
    rest = db[H_LEN:]
    found = 0
    index = 0
    bad = 0
    for i, byte in enumerate(rest):
        is_one = int(byte == 1)
        is_zero = int(byte == 0)
        take = is_one & (1 - found)
        index |= i * take
        bad |= (1 - found) & (1 - is_one) & (1 - is_zero)
        found |= is_one
    ok = hmac.compare_digest(db[:H_LEN], LABEL_HASH) & (em[0] == 0) & bool(found) & (not bad)
    if not ok:
        raise DecryptionError(DECODING_FAILED)
    return rest[index + 1:]
