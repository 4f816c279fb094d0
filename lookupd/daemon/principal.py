"""A client certificate's principal, written as Kafka writes it: the subject in RFC 2253 form.

Kafka's DefaultKafkaPrincipalBuilder names an SSL client `X500Principal.getName()`, the JDK's
RFC 2253 string of the certificate's subject (then ssl.principal.mapping.rules, DEFAULT: as is).
So `[[acl]]` rules written for a Kafka cluster name the same clients here. The JDK's rules
(sun.security.x509.AVA and RDN, checked against Java 17 by tests/test_principal.py):

* RDNs most specific first (the reverse of their order in the certificate), joined by `,`; the
  attributes of a multi-valued RDN joined by `+`, in their encoded order;
* CN, C, L, ST, O, OU, STREET, DC and UID by keyword, any other attribute by its dotted OID;
* a value of a string type is its text with `, = + < > # ; " \\` escaped by a backslash, NUL as
  `\\00`, and leading and trailing spaces (and carriage returns) escaped; a value of another type,
  or of an attribute named by its OID, is `#` and the hex of its DER encoding.

So no subject can pass for another: `CN=admin,O=ops` is two attributes, and a common name
`admin,O=ops` is `CN=admin\\,O\\=ops`.

Pure logic over the certificate's DER bytes (`ssl.SSLObject.getpeercert(binary_form=True)`),
bounded: the certificate was verified by the client CA, but its bytes are still a peer's.
"""

from __future__ import annotations

# RFC 2253 keywords, by the attribute's OID (what the JDK writes by name; the rest by OID).
_KEYWORDS = {"2.5.4.3": "CN", "2.5.4.6": "C", "2.5.4.7": "L", "2.5.4.8": "ST", "2.5.4.10": "O",
             "2.5.4.11": "OU", "2.5.4.9": "STREET", "0.9.2342.19200300.100.1.25": "DC",
             "0.9.2342.19200300.100.1.1": "UID"}
# DER tags the JDK writes as text (PrintableString, T61String, IA5String, GeneralString, BMPString,
# UTF8String); any other value is written as hex. Their content is read as UTF-8, as the JDK does.
_STRING_TAGS = frozenset((0x13, 0x14, 0x16, 0x1B, 0x1E, 0x0C))
_ESCAPED = frozenset(',=+<>#;"\\')
_SEQUENCE, _SET, _OID, _VERSION = 0x30, 0x31, 0x06, 0xA0
# Bounds on a peer's subject: far past any real certificate, short of costing the daemon anything.
MAX_RDNS = 64
MAX_ATTRIBUTES_PER_RDN = 16
MAX_PRINCIPAL_CHARS = 4096


class SubjectError(ValueError):
    """The certificate's subject is not DER this module reads (or is past its bounds)."""


def principal_of(der_certificate: bytes | None) -> str | None:
    """The ACL principal of a verified peer certificate (DER): its subject as Kafka writes it,
    e.g. `CN=etl,O=acme`; None without a certificate, for an empty subject, or for a subject that
    cannot be read (the connection then has no certificate principal, and must authenticate otherwise)."""
    if not der_certificate:
        return None
    try:
        name = rfc2253_name(subject_of(der_certificate))
    except SubjectError:
        return None
    return name or None


def subject_of(der_certificate: bytes) -> bytes:
    """The DER bytes of a certificate's subject Name (TBSCertificate's sixth field, fifth without a version)."""
    cert = memoryview(der_certificate)
    tag, start, end = _tlv(cert, 0, len(cert))
    _expect(tag, _SEQUENCE, "certificate")
    tag, pos, tbs_end = _tlv(cert, start, end)
    _expect(tag, _SEQUENCE, "tbsCertificate")
    fields = []
    while pos < tbs_end and len(fields) < 6:
        tag, content, field_end = _tlv(cert, pos, tbs_end)
        fields.append((tag, pos, field_end))
        pos = field_end
    if fields and fields[0][0] == _VERSION:
        fields.pop(0)
    if len(fields) < 5:
        raise SubjectError("tbsCertificate ends before its subject")
    tag, begin, finish = fields[4]  # serialNumber, signature, issuer, validity, subject
    _expect(tag, _SEQUENCE, "subject")
    return bytes(cert[begin:finish])


def rfc2253_name(der_name: bytes) -> str:
    """A DER Name as the JDK's X500Principal.getName() writes it (RFC 2253)."""
    buf = memoryview(der_name)
    tag, pos, end = _tlv(buf, 0, len(buf))
    _expect(tag, _SEQUENCE, "Name")
    rdns = []
    for set_pos, set_end in _children(buf, pos, end, _SET, "RDN", MAX_RDNS):
        attributes = [_attribute(buf, a, b) for a, b in
                      _children(buf, set_pos, set_end, _SEQUENCE, "AttributeTypeAndValue", MAX_ATTRIBUTES_PER_RDN)]
        if not attributes:
            raise SubjectError("an empty RDN")
        rdns.append("+".join(attributes))
    name = ",".join(reversed(rdns))
    if len(name) > MAX_PRINCIPAL_CHARS:
        raise SubjectError(f"a subject longer than {MAX_PRINCIPAL_CHARS} characters")
    return name


def _children(buf: memoryview, pos: int, end: int, tag: int, what: str, most: int):
    """(content start, content end) of each DER value in [pos, end), each of `tag`, at most `most` of them."""
    count = 0
    while pos < end:
        if count == most:
            raise SubjectError(f"more than {most} of {what}")
        found, start, stop = _tlv(buf, pos, end)
        _expect(found, tag, what)
        yield start, stop
        count += 1
        pos = stop


def _attribute(buf: memoryview, pos: int, end: int) -> str:
    tag, oid_pos, oid_end = _tlv(buf, pos, end)
    _expect(tag, _OID, "attribute type")
    oid = _dotted(buf[oid_pos:oid_end])
    value_at = oid_end
    tag, value_pos, value_end = _tlv(buf, value_at, end)
    if value_end != end:
        raise SubjectError("bytes after an attribute's value")
    keyword = _KEYWORDS.get(oid)
    if keyword is None or tag not in _STRING_TAGS:
        return f"{keyword or oid}=#{bytes(buf[value_at:value_end]).hex()}"
    return f"{keyword}={escape_value(bytes(buf[value_pos:value_end]).decode('utf-8', 'replace'))}"


def escape_value(text: str) -> str:
    """An attribute's text as the JDK escapes it in RFC 2253 form."""
    out = "".join("\\" + c if c in _ESCAPED else "\\00" if c == "\0" else c for c in text)
    lead = len(out) - len(out.lstrip(" \r"))
    trail = len(out.rstrip(" \r"))
    if lead == 0 and trail == len(out):
        return out
    if lead >= trail:  # nothing but spaces: each one escaped
        return "".join("\\" + c for c in out)
    return "".join("\\" + c for c in out[:lead]) + out[lead:trail] + "".join("\\" + c for c in out[trail:])


def _dotted(oid: memoryview) -> str:
    """An OBJECT IDENTIFIER's content as dotted decimal."""
    if not oid or len(oid) > 64 or oid[-1] & 0x80:
        raise SubjectError("a malformed attribute type")
    arcs, value = [], 0
    for byte in oid:
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            arcs.append(value)
            value = 0
    first = min(arcs[0] // 40, 2)
    return ".".join(map(str, [first, arcs[0] - 40 * first, *arcs[1:]]))


def _tlv(buf: memoryview, pos: int, end: int) -> tuple[int, int, int]:
    """(tag, content start, content end) of the DER value at `pos`, which must end by `end`."""
    if pos + 2 > end:
        raise SubjectError("truncated DER")
    tag, length = buf[pos], buf[pos + 1]
    if tag & 0x1F == 0x1F:
        raise SubjectError("a multi-byte DER tag")
    pos += 2
    if length & 0x80:
        count = length & 0x7F
        if not 1 <= count <= 4 or pos + count > end:
            raise SubjectError("a malformed DER length")
        length = int.from_bytes(buf[pos:pos + count], "big")
        pos += count
    if pos + length > end:
        raise SubjectError("DER longer than what holds it")
    return tag, pos, pos + length


def _expect(tag: int, want: int, what: str) -> None:
    if tag != want:
        raise SubjectError(f"{what}: DER tag {tag:#04x}, expected {want:#04x}")
