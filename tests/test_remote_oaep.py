"""RSA-OAEP with SHA3-512 (lookupd/log/remote/oaep.py) against BouncyCastle, the plugin's own implementation."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import load_der_private_key
from hypothesis import given, settings
from hypothesis import strategies as st

import tiered_writer
from lookupd.log.remote import oaep

VECTORS = Path(__file__).parent / "vectors"
BCPROV = Path("/usr/share/java/bcprov.jar")  # Debian's libbcprov-java (Makefile's DEB_PACKAGES)


def _check(doc: dict) -> int:
    keys = [load_der_private_key(base64.b64decode(k["private_key_pkcs8"]), None) for k in doc["keys"]]
    for v in doc["vectors"]:
        assert oaep.decrypt(keys[v["key"]], base64.b64decode(v["ciphertext"])).hex() == v["message"]
    return len(doc["vectors"])


def test_committed_bouncycastle_vectors_decrypt():
    assert _check(json.loads((VECTORS / "oaep_sha3_512.json").read_text())) == 10


def test_fresh_bouncycastle_vectors_decrypt():
    """Regenerate with Java 17 + BouncyCastle (`RSA/NONE/OAEPWithSHA3-512AndMGF1Padding`) and decrypt."""
    java = shutil.which("java")
    assert java and BCPROV.exists(), "needs Java 17 (a JDK) and Debian's libbcprov-java: `make system-deps`"
    out = subprocess.run([java, "-cp", str(BCPROV), str(VECTORS / "OaepVectors.java")], capture_output=True,
                         text=True, timeout=300, check=True).stdout
    assert _check(json.loads(out)) == 10


KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)


@settings(max_examples=30, deadline=None)
@given(st.binary(min_size=0, max_size=2048 // 8 - 2 * 64 - 2), st.binary(min_size=64, max_size=64))
def test_the_test_writers_wrap_round_trips(message, seed):
    assert oaep.decrypt(KEY, tiered_writer.oaep_wrap(KEY.public_key(), message, seed)) == message


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 255), st.integers(0, 7))
def test_any_flipped_bit_is_a_decryption_error(byte, bit):
    wrapped = bytearray(tiered_writer.oaep_wrap(KEY.public_key(), b"k" * 32))
    wrapped[byte] ^= 1 << bit
    with pytest.raises(oaep.DecryptionError):
        oaep.decrypt(KEY, bytes(wrapped))


def test_wrong_key_and_wrong_length_are_decryption_errors():
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    wrapped = tiered_writer.oaep_wrap(KEY.public_key(), b"k" * 32)
    with pytest.raises(oaep.DecryptionError, match="wrong key or corrupt"):
        oaep.decrypt(other, wrapped)
    with pytest.raises(oaep.DecryptionError, match="does not fit"):
        oaep.decrypt(KEY, wrapped[1:])
    with pytest.raises(oaep.DecryptionError, match="below the RSA modulus"):
        oaep.decrypt(KEY, b"\xff" * 256)


def test_an_oaep_block_with_another_digest_is_rejected():
    """OAEP with another digest (cryptography's SHA-256 here) must not decode as SHA3-512."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding
    wrapped = KEY.public_key().encrypt(b"k" * 32, padding.OAEP(mgf=padding.MGF1(hashes.SHA256()),
                                                                 algorithm=hashes.SHA256(), label=None))
    with pytest.raises(oaep.DecryptionError):
        oaep.decrypt(KEY, wrapped)
