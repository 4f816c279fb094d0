"""Keyring: PEM private keys loaded without OpenSSL's slow primality check, but checked for consistent
numbers; every bad key file is a clear error naming it, and a good one unwraps the plugin's data keys."""

from __future__ import annotations

import os

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

import lookupd.tools.tieredwriter as W
from lookupd.errors import Unavailable
from lookupd.log.remote.keyring import Keyring
from lookupd.log.remote.manifest import Encryption


def _pem(path, key) -> str:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    return str(path)


def test_a_good_key_unwraps_the_data_key(tmp_path):
    key = W.WrappingKey.create(tmp_path)
    data_key = os.urandom(32)
    enc = Encryption(key.key_id, W.oaep_wrap(key.private_key.public_key(), data_key), b"")
    assert Keyring({key.key_id: key.pem_path}).unwrap(enc, "m") == data_key


@pytest.mark.parametrize("field", ["iqmp", "dmp1", "dmq1", "d"])
def test_a_key_whose_numbers_disagree_is_refused(tmp_path, field):
    good = W.WrappingKey.create(tmp_path)
    priv = good.private_key.private_numbers()
    numbers = {"p": priv.p, "q": priv.q, "d": priv.d, "dmp1": priv.dmp1, "dmq1": priv.dmq1, "iqmp": priv.iqmp}
    numbers[field] += 2
    bad = rsa.RSAPrivateNumbers(**numbers, public_numbers=priv.public_numbers).private_key(
        unsafe_skip_rsa_key_validation=True)
    path = _pem(tmp_path / "bad.pem", bad)
    enc = Encryption("k", W.oaep_wrap(good.private_key.public_key(), os.urandom(32)), b"")
    with pytest.raises(Unavailable, match=f"{path} .*not a valid RSA private key"):
        Keyring({"k": path}).unwrap(enc, "m")


def test_a_file_that_is_no_pem_key_is_refused(tmp_path):
    path = tmp_path / "junk.pem"
    path.write_text("not a key")
    enc = Encryption("k", b"x" * 256, b"")
    with pytest.raises(Unavailable, match="not an unencrypted PEM private key"):
        Keyring({"k": str(path)}).unwrap(enc, "m")
    with pytest.raises(Unavailable, match="cannot read the private key file"):
        Keyring({"k": str(tmp_path / "missing.pem")}).unwrap(enc, "m")


def test_a_key_over_pycryptodomes_bound_is_refused(tmp_path):
    """A modulus over 16384 bits (pycryptodome's bound; OpenSSL loads it without its check): a clear error
    naming the file. Its numbers agree, its factors are merely odd (nothing here tests primality), so it
    reaches pycryptodome and is refused there."""
    import math
    import secrets

    e = 65537

    def factor(bits: int) -> int:
        while True:
            x = secrets.randbits(bits) | (1 << (bits - 1)) | 1
            if math.gcd(e, x - 1) == 1:
                return x
    p, q = factor(8200), factor(8200)
    while math.gcd(p, q) != 1:
        q = factor(8200)
    d = pow(e, -1, (p - 1) * (q - 1) // math.gcd(p - 1, q - 1))
    big = rsa.RSAPrivateNumbers(p=p, q=q, d=d, dmp1=d % (p - 1), dmq1=d % (q - 1), iqmp=pow(q, -1, p),
                                public_numbers=rsa.RSAPublicNumbers(e, p * q)).private_key(
        unsafe_skip_rsa_key_validation=True)
    path = _pem(tmp_path / "big.pem", big)
    enc = Encryption("k", b"x" * ((p * q).bit_length() // 8), b"")
    with pytest.raises(Unavailable, match=f"{path} .*not a usable RSA private key: RSA modulus is larger"):
        Keyring({"k": path}).unwrap(enc, "m")
