"""RSA-OAEP with SHA3-512 (lookupd/log/remote/oaep.py) against BouncyCastle, the plugin's own implementation.

Every test runs both paths: pycryptodome's (the default) and the Python reference (`python_only()`), and
the faults must give both the same error, word for word."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import load_der_private_key
from hypothesis import given, settings
from hypothesis import strategies as st

from lookupd.tools import tieredwriter
from lookupd.errors import CorruptDataError
from lookupd.log import _accel
from lookupd.log.remote import oaep
from lookupd.log.remote.keyring import Keyring
from lookupd.log.remote.manifest import Encryption

VECTORS = Path(__file__).parent / "vectors"
BCPROV = Path("/usr/share/java/bcprov.jar")  # Debian's libbcprov-java (Makefile's DEB_PACKAGES)
REPO = Path(__file__).resolve().parents[1]
PATHS = ["pycryptodome", "python"]

KEYS = {bits: rsa.generate_private_key(public_exponent=65537, key_size=bits) for bits in (2048, 4096)}
UNWRAPPING = {bits: oaep.UnwrappingKey(key) for bits, key in KEYS.items()}
KEY, UNWRAP = KEYS[2048], UNWRAPPING[2048]


def _on(path: str):
    """The context a path runs in: nothing for pycryptodome's, `python_only()` for the reference."""
    return contextlib.nullcontext() if path == "pycryptodome" else _accel.python_only()


def _outcome(key: oaep.UnwrappingKey, ciphertext: bytes, path: str) -> tuple[str, str]:
    """("ok", message hex) or ("error", its words), on one path."""
    with _on(path):
        try:
            return "ok", key.decrypt(ciphertext).hex()
        except oaep.DecryptionError as e:
            return "error", str(e)


def _both(key: oaep.UnwrappingKey, ciphertext: bytes) -> tuple[str, str]:
    """The one outcome both paths give (asserted alike)."""
    fast, reference = (_outcome(key, ciphertext, path) for path in PATHS)
    assert fast == reference
    return fast


def test_the_fast_path_is_pycryptodome():
    """Not a silent fallback: the default path is pycryptodome's, and python_only() leaves it."""
    assert UNWRAP._fast is not None and type(UNWRAP._fast).__module__.startswith("Crypto.")


def _check(doc: dict) -> int:
    keys = [oaep.UnwrappingKey(load_der_private_key(base64.b64decode(k["private_key_pkcs8"]), None))
            for k in doc["keys"]]
    for v in doc["vectors"]:
        assert _both(keys[v["key"]], base64.b64decode(v["ciphertext"])) == ("ok", v["message"])
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


@pytest.mark.parametrize("bits", [2048, 4096])
@settings(max_examples=15, deadline=None)
@given(message=st.binary(min_size=0, max_size=2048 // 8 - 2 * 64 - 2), seed=st.binary(min_size=64, max_size=64))
def test_the_test_writers_wrap_round_trips(bits, message, seed):
    """The writer wraps with MGF1 on SHA3-512 as BouncyCastle does: pycryptodome decoding it proves that its
    MGF1 follows hashAlgo (SHA3-512), not its default SHA-1."""
    assert _both(UNWRAPPING[bits], tieredwriter.oaep_wrap(KEYS[bits].public_key(), message, seed)) == \
        ("ok", message.hex())


@pytest.mark.parametrize("bits", [2048, 4096])
def test_mgf1_on_another_digest_is_refused(bits):
    """SHA3-512 as the digest but MGF1 on SHA-512 (as long, another function): no path accepts it."""
    wrapped = tieredwriter.oaep_wrap(KEYS[bits].public_key(), b"k" * 32, mgf_digest=hashlib.sha512)
    assert _both(UNWRAPPING[bits], wrapped) == ("error", oaep.DECODING_FAILED)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 255), st.integers(0, 7))
def test_any_flipped_bit_is_the_same_decryption_error(byte, bit):
    wrapped = bytearray(tieredwriter.oaep_wrap(KEY.public_key(), b"k" * 32))
    wrapped[byte] ^= 1 << bit
    kind, words = _both(UNWRAP, bytes(wrapped))
    assert kind == "error" and "wrong key or corrupt" in words


@pytest.mark.parametrize("bits", [2048, 4096])
def test_wrong_key_and_wrong_length_are_the_same_decryption_errors(bits):
    k = bits // 8
    other = oaep.UnwrappingKey(rsa.generate_private_key(public_exponent=65537, key_size=bits))
    wrapped = tieredwriter.oaep_wrap(KEYS[bits].public_key(), b"k" * 32)
    key = UNWRAPPING[bits]
    assert _both(other, wrapped) in (("error", oaep.DECODING_FAILED),  # below the other modulus, or not
                                     ("error", "the wrapped key is not below the RSA modulus: wrong key or "
                                               "corrupt wrapped key"))
    assert _both(key, wrapped[1:]) == ("error", f"a wrapped key of {k - 1} bytes does not fit a {bits}-bit RSA key")
    assert _both(key, wrapped + b"\0") == ("error", f"a wrapped key of {k + 1} bytes does not fit a {bits}-bit "
                                                    "RSA key")
    assert _both(key, b"") == ("error", f"a wrapped key of 0 bytes does not fit a {bits}-bit RSA key")
    assert _both(key, b"\xff" * k) == ("error", "the wrapped key is not below the RSA modulus: wrong key or "
                                                "corrupt wrapped key")


def test_an_oaep_block_with_another_digest_is_rejected():
    """OAEP with another digest (cryptography's SHA-256 here) must not decode as SHA3-512."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding
    wrapped = KEY.public_key().encrypt(b"k" * 32, padding.OAEP(mgf=padding.MGF1(hashes.SHA256()),
                                                                 algorithm=hashes.SHA256(), label=None))
    assert _both(UNWRAP, wrapped) == ("error", oaep.DECODING_FAILED)


@pytest.mark.parametrize("path", PATHS)
def test_the_keyring_names_the_object_key_on_either_path(tmp_path, path):
    """Through the Keyring (one PEM file, loaded once), a good wrap unwraps and a bad one is CORRUPT_DATA
    naming the manifest's key, with the same words on both paths."""
    key = tieredwriter.WrappingKey.create(tmp_path, bits=2048)
    keyring = Keyring({key.key_id: key.pem_path})
    data_key = os.urandom(32)
    wrapped = tieredwriter.oaep_wrap(key.private_key.public_key(), data_key)
    with _on(path):
        assert keyring.unwrap(Encryption(key.key_id, wrapped, b""), "t/0/x.rsm-manifest") == data_key
        flipped = bytes([wrapped[0], wrapped[1] ^ 1]) + wrapped[2:]
        with pytest.raises(CorruptDataError, match=r"t/0/x\.rsm-manifest.*encryption\.dataKey \(key-1\): "
                                                   r"RSA-OAEP \(SHA3-512\) decoding failed"):
            keyring.unwrap(Encryption(key.key_id, flipped, b""), "t/0/x.rsm-manifest")


PURE_PROBE = """
import base64, json, sys
from cryptography.hazmat.primitives.serialization import load_der_private_key
from lookupd.log.remote import oaep
doc = json.load(open(sys.argv[1]))
keys = [oaep.UnwrappingKey(load_der_private_key(base64.b64decode(k["private_key_pkcs8"]), None)) for k in doc["keys"]]
ok = all(keys[v["key"]].decrypt(base64.b64decode(v["ciphertext"])).hex() == v["message"] for v in doc["vectors"])
print(json.dumps({"ok": ok, "pycryptodome": any(m == "Crypto" or m.startswith("Crypto.") for m in sys.modules)}))
"""


def test_a_pure_python_process_unwraps_without_pycryptodome():
    """LOOKUPD_PURE_PYTHON=1: the reference path alone, pycryptodome never imported."""
    env = dict(os.environ, PYTHONPATH=str(REPO), LOOKUPD_PURE_PYTHON="1")
    out = subprocess.run([sys.executable, "-c", PURE_PROBE, str(VECTORS / "oaep_sha3_512.json")], env=env,
                         cwd=REPO, capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(out.stdout) == {"ok": True, "pycryptodome": False}
