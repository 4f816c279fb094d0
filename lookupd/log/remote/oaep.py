"""RSA-OAEP decryption with SHA3-512 for the digest and for MGF1 and an empty label (RFC 8017 §7.1.2).

The plugin wraps each segment's AES data key with BouncyCastle's `RSA/NONE/OAEPWithSHA3-512AndMGF1Padding`.
`cryptography` refuses SHA3 in OAEP, so the RSA operation uses the key's private numbers and the decoding
is done here. Every decoding fault gives the same error, found after the same work (RFC 8017's advice
against padding oracles).
"""

from __future__ import annotations

import hashlib
import hmac
import math
import secrets

from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey

H_LEN = 64  # SHA3-512's output size
LABEL_HASH = hashlib.sha3_512(b"").digest()  # lHash of the empty label


class DecryptionError(ValueError):
    """The ciphertext is not an OAEP encoding under this key (wrong key, or corrupt)."""


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


def rsa_decrypt_raw(key: RSAPrivateKey, c: int) -> int:
    """m = c^d mod n, by the Chinese remainder theorem on the private numbers, blinded (the exponentiation
    runs on c * r^e for a random r, so its timing says nothing about c)."""
    priv = key.private_numbers()
    n, e = priv.public_numbers.n, priv.public_numbers.e
    while True:
        r = secrets.randbelow(n - 2) + 2
        if math.gcd(r, n) == 1:
            break
    blinded = (c * pow(r, e, n)) % n
    m1 = pow(blinded, priv.dmp1, priv.p)
    m2 = pow(blinded, priv.dmq1, priv.q)
    h = (priv.iqmp * (m1 - m2)) % priv.p
    return ((m2 + h * priv.q) * pow(r, -1, n)) % n


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
        raise DecryptionError("RSA-OAEP (SHA3-512) decoding failed: wrong key or corrupt wrapped key")
    return rest[index + 1:]


def decrypt(key: RSAPrivateKey, ciphertext: bytes) -> bytes:
    """RSAES-OAEP-DECRYPT(K, C) with SHA3-512, MGF1-SHA3-512 and an empty label."""
    n = key.private_numbers().public_numbers.n
    k = (n.bit_length() + 7) // 8
    if len(ciphertext) != k or k < 2 * H_LEN + 2:
        raise DecryptionError(f"a wrapped key of {len(ciphertext)} bytes does not fit a {k * 8}-bit RSA key")
    c = int.from_bytes(ciphertext, "big")
    if c >= n:
        raise DecryptionError("the wrapped key is not below the RSA modulus: wrong key or corrupt wrapped key")
    return oaep_decode(rsa_decrypt_raw(key, c).to_bytes(k, "big"), k)
