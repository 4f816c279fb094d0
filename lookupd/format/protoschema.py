""".proto text to a `FileDescriptorProto`, in process: no protoc, no files. No I/O.

The registry stores a Protobuf schema as `.proto` text (or, from some clients, as a base64
`FileDescriptorProto`: both are taken). The text is parsed by proto-schema-parser (a pure-Python
grammar of proto2, proto3 and editions) and turned into the descriptor protoc would make for what a
decoder needs: packages, messages (nested), enums, fields with their labels and types, oneofs,
proto3 `optional` (a synthetic oneof), maps (a nested `...Entry` message) and `packed`. Type names
are left as written: the protobuf runtime resolves them by scope, as protoc does. Options other
than `packed` and `map_entry`, services, extensions and reserved ranges change nothing a reader
decodes and are left out. Why this and not protoc (grpcio-tools): bench/bench_schemas.py measures
both on the same schemas; see docs/performance.md.
"""

from __future__ import annotations

import base64
import binascii

from google.protobuf import descriptor_pb2

FDP = descriptor_pb2.FieldDescriptorProto
SCALARS = {
    "double": FDP.TYPE_DOUBLE, "float": FDP.TYPE_FLOAT, "int64": FDP.TYPE_INT64, "uint64": FDP.TYPE_UINT64,
    "int32": FDP.TYPE_INT32, "fixed64": FDP.TYPE_FIXED64, "fixed32": FDP.TYPE_FIXED32, "bool": FDP.TYPE_BOOL,
    "string": FDP.TYPE_STRING, "bytes": FDP.TYPE_BYTES, "uint32": FDP.TYPE_UINT32, "sfixed32": FDP.TYPE_SFIXED32,
    "sfixed64": FDP.TYPE_SFIXED64, "sint32": FDP.TYPE_SINT32, "sint64": FDP.TYPE_SINT64,
}
MAX_DEPTH = 64  # messages nested in messages: past this the schema is refused (the parser recurses)


class ProtoSyntaxError(ValueError):
    """The schema is neither .proto text this parser reads nor a base64 FileDescriptorProto."""


def file_descriptor(text: str, name: str) -> descriptor_pb2.FileDescriptorProto:
    """The descriptor of one schema, named `name` (what other schemas import it as)."""
    fdp = _from_base64(text)
    if fdp is None:
        fdp = _from_text(text)
    fdp.name = name
    return fdp


def _from_base64(text: str) -> descriptor_pb2.FileDescriptorProto | None:
    stripped = text.strip()
    if not stripped or any(c in stripped for c in " \n;{"):
        return None
    try:
        raw = base64.b64decode(stripped, validate=True)
        fdp = descriptor_pb2.FileDescriptorProto.FromString(raw)
    except (binascii.Error, ValueError, Exception):  # noqa: BLE001 - protobuf's DecodeError has no public base
        return None
    return fdp if fdp.message_type or fdp.enum_type else None


class _Raising:
    """An ANTLR error listener that stops at the first syntax error (ANTLR's default prints and recovers)."""

    def syntaxError(self, recognizer, offending, line, column, msg, e):  # noqa: N802 - ANTLR's name
        raise ProtoSyntaxError(f"line {line}:{column}: {msg}")

    def reportAmbiguity(self, *a):  # noqa: N802
        pass

    def reportAttemptingFullContext(self, *a):  # noqa: N802
        pass

    def reportContextSensitivity(self, *a):  # noqa: N802
        pass


def _quiet(recognizer) -> None:
    recognizer.removeErrorListeners()
    recognizer.addErrorListener(_Raising())


def _from_text(text: str) -> descriptor_pb2.FileDescriptorProto:
    from proto_schema_parser import ast
    from proto_schema_parser.parser import Parser

    try:
        tree = Parser(setup_lexer=_quiet, setup_parser=_quiet).parse(text)
    except RecursionError:
        raise ProtoSyntaxError("the schema nests too deeply") from None
    fdp = descriptor_pb2.FileDescriptorProto()
    syntax = (tree.syntax or "proto2").strip("'\"")
    if tree.edition is not None:
        raise ProtoSyntaxError(f"edition {tree.edition} schemas are not read (proto2 and proto3 are)")
    fdp.syntax = syntax
    for el in tree.file_elements:
        if isinstance(el, ast.Package):
            fdp.package = el.name
        elif isinstance(el, ast.Import):
            fdp.dependency.append(el.name.strip("'\""))
        elif isinstance(el, ast.Message):
            _message(ast, el, fdp.message_type.add(), syntax, 1)
        elif isinstance(el, ast.Enum):
            _enum(ast, el, fdp.enum_type.add())
    return fdp


def _message(ast, msg, out: descriptor_pb2.DescriptorProto, syntax: str, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise ProtoSyntaxError(f"messages nest deeper than {MAX_DEPTH}")
    out.name = msg.name
    optional: list[descriptor_pb2.FieldDescriptorProto] = []  # proto3 `optional` fields
    for el in msg.elements:
        if isinstance(el, ast.Field):
            f = _field(ast, el, out, None)
            if syntax == "proto3" and el.cardinality == ast.FieldCardinality.OPTIONAL:
                optional.append(f)
        elif isinstance(el, ast.MapField):
            _map(el, out)
        elif isinstance(el, ast.OneOf):
            index = len(out.oneof_decl)
            out.oneof_decl.add(name=el.name)
            for f in el.elements:
                if isinstance(f, ast.Field):
                    _field(ast, f, out, index)
                elif isinstance(f, ast.Group):
                    raise ProtoSyntaxError(f"group {f.name} in {msg.name}: groups are not read")
        elif isinstance(el, ast.Message):
            _message(ast, el, out.nested_type.add(), syntax, depth + 1)
        elif isinstance(el, ast.Enum):
            _enum(ast, el, out.enum_type.add())
        elif isinstance(el, ast.Group):
            raise ProtoSyntaxError(f"group {el.name} in {msg.name}: groups are not read")
    for f in optional:  # each its synthetic oneof, after every real one (as protoc orders them)
        f.proto3_optional = True
        f.oneof_index = len(out.oneof_decl)
        name = "_" + f.name
        while any(o.name == name for o in out.oneof_decl):
            name = "X" + name
        out.oneof_decl.add(name=name)


def _field(ast, f, msg: descriptor_pb2.DescriptorProto, oneof: int | None) -> descriptor_pb2.FieldDescriptorProto:
    out = msg.field.add(name=f.name, number=f.number, json_name=_json_name(f.name))
    card = f.cardinality
    out.label = FDP.LABEL_REPEATED if card == ast.FieldCardinality.REPEATED else \
        FDP.LABEL_REQUIRED if card == ast.FieldCardinality.REQUIRED else FDP.LABEL_OPTIONAL
    _type(f.type, out)
    if oneof is not None:
        out.oneof_index = oneof
    for opt in f.options:
        if opt.name == "packed":
            out.options.packed = str(opt.value).lower() == "true"
    return out


def _map(f, msg: descriptor_pb2.DescriptorProto) -> None:
    entry_name = "".join(p[:1].upper() + p[1:] for p in f.name.split("_")) + "Entry"
    entry = msg.nested_type.add(name=entry_name)
    entry.options.map_entry = True
    k = entry.field.add(name="key", number=1, label=FDP.LABEL_OPTIONAL, json_name="key")
    _type(f.key_type, k)
    v = entry.field.add(name="value", number=2, label=FDP.LABEL_OPTIONAL, json_name="value")
    _type(f.value_type, v)
    msg.field.add(name=f.name, number=f.number, label=FDP.LABEL_REPEATED, type_name=entry_name,
                  type=FDP.TYPE_MESSAGE, json_name=_json_name(f.name))


def _enum(ast, e, out: descriptor_pb2.EnumDescriptorProto) -> None:
    out.name = e.name
    for el in e.elements:
        if isinstance(el, ast.EnumValue):
            out.value.add(name=el.name, number=el.number)
        elif isinstance(el, ast.Option) and el.name == "allow_alias":
            out.options.allow_alias = str(el.value).lower() == "true"


def _type(name: str, out: descriptor_pb2.FieldDescriptorProto) -> None:
    if name in SCALARS:
        out.type = SCALARS[name]
    else:
        out.type_name = name  # a message or an enum: the runtime resolves it (and which) by scope


def _json_name(name: str) -> str:
    """protoc's json_name: lowerCamelCase, underscores dropped and the next letter upper-cased."""
    out, up = [], False
    for c in name:
        if c == "_":
            up = True
        else:
            out.append(c.upper() if up else c)
            up = False
    return "".join(out)
