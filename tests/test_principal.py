"""Certificate principals as Kafka writes them (lookupd.daemon.principal), checked against the JDK itself:
Kafka's DefaultKafkaPrincipalBuilder names a TLS client X500Principal.getName() of its certificate's
subject, which tests/vectors/X500Names.java prints with Java 17 for every subject below."""

from __future__ import annotations

import random
import shutil
import subprocess
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import NameOID

from lookupd.daemon.principal import MAX_RDNS, principal_of, rfc2253_name, subject_of
from tls_certs import make_certs

JAVA_NAMES = Path(__file__).parent / "vectors" / "X500Names.java"

# DER string tags
UTF8, PRINTABLE, T61, IA5, BMP, GENERAL = 0x0C, 0x13, 0x14, 0x16, 0x1E, 0x1B
CN, O, OU, C, L, ST, STREET = "2.5.4.3", "2.5.4.10", "2.5.4.11", "2.5.4.6", "2.5.4.7", "2.5.4.8", "2.5.4.9"
DC, UID, EMAIL, SERIAL = "0.9.2342.19200300.100.1.25", "0.9.2342.19200300.100.1.1", "1.2.840.113549.1.9.1", "2.5.4.5"


def _tlv(tag: int, content: bytes) -> bytes:
    n = len(content)
    length = bytes([n]) if n < 0x80 else bytes([0x80 | ((n.bit_length() + 7) // 8)]) + n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([tag]) + length + content


def _oid(dotted: str) -> bytes:
    arcs = [int(a) for a in dotted.split(".")]
    out = bytearray()
    for arc in [arcs[0] * 40 + arcs[1], *arcs[2:]]:
        chunk = [arc & 0x7F]
        while arc > 0x7F:
            arc >>= 7
            chunk.append(0x80 | (arc & 0x7F))
        out += bytes(reversed(chunk))
    return _tlv(0x06, bytes(out))


def name(*rdns) -> bytes:
    """A DER Name from RDNs in certificate order (least specific first), each a list of (oid, tag, value):
    a str value is encoded for its tag (UTF-16BE for BMPString, else UTF-8), bytes are taken as they are."""
    def value(tag, v):
        if isinstance(v, str):
            v = v.encode("utf-16-be") if tag == BMP else v.encode("utf-8")
        return _tlv(tag, v)
    return _tlv(0x30, b"".join(_tlv(0x31, b"".join(_tlv(0x30, _oid(oid) + value(tag, v)) for oid, tag, v in rdn))
                               for rdn in rdns))


def cn(text: str, tag: int = UTF8) -> bytes:
    return name([(CN, tag, text)])


# Subjects that an unescaped join turns into another subject, or that test one rule of the JDK's each.
TRICKY = {
    "comma and equals in a common name": cn("admin,O=ops"),
    "the subject it must not equal": name([(O, UTF8, "ops")], [(CN, UTF8, "admin")]),
    "plus": cn("a+b"),
    "quotes": cn('say "hi"'),
    "backslash": cn("back\\slash"),
    "angle brackets, semicolon, hash": cn("<x>;#y"),
    "leading hash": cn("#1"),
    "leading and trailing spaces": cn("  padded  "),
    "only spaces": cn("   "),
    "carriage return at the end": cn("cr\r"),
    "inner spaces and a tab": cn("a  b\tc"),
    "NUL": cn("nul\0here"),
    "newline": cn("two\nlines"),
    "empty value": cn(""),
    "unicode": cn("Zoë 日本 🎉"),
    "multi-valued RDN": name([(C, PRINTABLE, "DE")], [(CN, UTF8, "alice"), (UID, UTF8, "42")]),
    "multi-valued RDN, other order": name([(UID, UTF8, "42"), (CN, UTF8, "alice")]),
    "multi-valued RDN with a plus in a value": name([(CN, UTF8, "x+y"), (O, UTF8, "a,b")]),
    "every keyword": name([(DC, IA5, "com")], [(DC, IA5, "example")], [(C, PRINTABLE, "US")], [(ST, UTF8, "CA")],
                          [(L, UTF8, "SF")], [(STREET, UTF8, "1 Main St")], [(O, UTF8, "Acme, Inc.")],
                          [(OU, UTF8, "eng")], [(UID, UTF8, "u1")], [(CN, UTF8, "etl")]),
    "email address (no RFC 2253 keyword)": name([(CN, UTF8, "etl")], [(EMAIL, IA5, "etl@example.com")]),
    "serial number (no RFC 2253 keyword)": name([(SERIAL, PRINTABLE, "1234")], [(CN, UTF8, "etl")]),
    "an unknown OID": name([("1.3.6.1.4.1.311.60.2.1.3", PRINTABLE, "US")], [(CN, UTF8, "x")]),
    "PrintableString": cn("Plain Name", PRINTABLE),
    "IA5String": cn("ia5,name", IA5),
    "T61String of latin-1 bytes": name([(CN, T61, "café".encode("latin-1"))]),
    "BMPString": cn("bmp", BMP),
    "GeneralString": cn("general", GENERAL),
    "a common name that is not a string": name([(CN, 0x02, b"\x01\x00")]),
    "empty subject": _tlv(0x30, b""),
}


def _java(names: list[bytes]) -> list[str]:
    """X500Principal(der).getName() of each Name, from Java 17."""
    java = shutil.which("java")
    assert java, "needs Java 17 (a JDK: `java File.java`): `make system-deps`"
    out = subprocess.run([java, str(JAVA_NAMES)], input="".join(n.hex() + "\n" for n in names),
                         capture_output=True, text=True, timeout=120, check=True).stdout.split("\n")
    assert len(out) == len(names) + 1, out
    return [line if line.startswith("!") else bytes.fromhex(line).decode("utf-8") for line in out[:-1]]


def _random_names(count: int) -> list[bytes]:
    """Subjects of random values over the characters RFC 2253 treats specially, in random shapes."""
    rnd = random.Random(40)
    alphabet = ' ,=+<>#;"\\\r\n\t\0abcXYZ09-._:/()\'?é日'
    oids = [CN, O, OU, C, L, ST, STREET, DC, UID, EMAIL]
    tags = [UTF8, UTF8, UTF8, PRINTABLE, IA5]
    out = []
    for _ in range(count):
        rdns = [[(rnd.choice(oids), rnd.choice(tags), "".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 8))))
                 for _ in range(rnd.choice((1, 1, 1, 2, 3)))] for _ in range(rnd.randint(1, 4))]
        out.append(name(*rdns))
    return out


def test_principals_are_what_the_jdk_names_them():
    """Every tricky subject, and 300 random ones, as X500Principal.getName() writes it: byte for byte."""
    names = list(TRICKY.values()) + _random_names(300)
    labels = list(TRICKY) + [f"random #{i}" for i in range(300)]
    want = _java(names)
    got = [rfc2253_name(n) for n in names]
    wrong = [(label, w, g) for label, w, g in zip(labels, want, got) if w != g]
    assert not wrong, wrong[:5]
    # what the issue found: the subject joined without escaping made one common name into two attributes
    assert got[0] == "CN=admin\\,O\\=ops" and got[1] == "CN=admin,O=ops"
    assert len(set(got)) == len(set(names)), "two different subjects with one principal"


def test_principal_of_a_certificate(tmp_path):
    """principal_of reads the subject out of the DER certificate (with and without the version field), and
    names only a certificate it can read."""
    certs = make_certs(str(tmp_path))
    for cert_name, want in (("etl", "CN=spark-etl"), ("admin", "CN=admin,O=ops"),
                            ("lookalike", "CN=admin\\,O\\=ops")):
        with open(certs.pem(cert_name), "rb") as f:
            der = x509.load_pem_x509_certificate(f.read()).public_bytes(serialization.Encoding.DER)
        assert principal_of(der) == want
        assert subject_of(der) == x509.load_der_x509_certificate(der).subject.public_bytes()
        for cut in (10, len(der) // 3, len(der) // 2):  # a truncated certificate: no principal, no exception
            assert principal_of(der[:cut]) is None
    assert principal_of(None) is None and principal_of(b"") is None and principal_of(b"\x30\x00") is None


def test_hostile_names_are_bounded():
    """Past MAX_RDNS, a long-form length past the bytes, a multi-byte tag, or a malformed OID: refused, quickly."""
    from lookupd.daemon.principal import SubjectError
    many = name(*[[(CN, UTF8, "x")] for _ in range(MAX_RDNS + 1)])
    for bad in (many, b"\x30\x84\xff\xff\xff\xff", b"\x30\x03\x1f\x01\x00",
                _tlv(0x30, _tlv(0x31, _tlv(0x30, _tlv(0x06, b"\x55\x84") + _tlv(UTF8, b"x")))),
                _tlv(0x30, _tlv(0x31, b""))):
        with pytest.raises(SubjectError):
            rfc2253_name(bad)
    assert rfc2253_name(name(*[[(CN, UTF8, "x")] for _ in range(MAX_RDNS)])) == ",".join(["CN=x"] * MAX_RDNS)


def test_a_cryptography_name_matches_its_own_rfc4514_where_the_rules_agree():
    """A second, independent writer for the plain cases (cryptography's RFC 4514, which differs from the JDK
    only in escaping `=` and `#` inside a value)."""
    subject = x509.Name([x509.NameAttribute(NameOID.COUNTRY_NAME, "DE"), x509.NameAttribute(NameOID.ORGANIZATION_NAME,
                                                                                           "Acme, Inc."),
                         x509.NameAttribute(NameOID.COMMON_NAME, "etl+batch")])
    assert rfc2253_name(subject.public_bytes()) == subject.rfc4514_string() == "CN=etl\\+batch,O=Acme\\, Inc.,C=DE"
