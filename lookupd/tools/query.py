"""`lookupd query METHOD ARG...`: call one daemon method and print the answer as JSON.

Arguments are read by the param they fill (lookupd.rpc.methods): a topic, mode, token, group or isolation is the
text as given (a topic named 2024 stays "2024"); a timestamp is any time of lookupd.format.times
(epoch milliseconds, ISO 8601, -1h, now, earliest, latest, max); a list of timestamps is a JSON
list whose strings are such times. Every other argument, and every argument of a method this
client does not know, is its JSON value when it parses (5, [1,2], null), else the text. Bytes
in the answer print as {"$base64": "<base64 text>"}.
"""

from __future__ import annotations

import base64
import json
import re
import sys
from datetime import datetime, timezone
from typing import Any, Callable

from ..errors import InvalidArgument
from ..format.times import MAX_TIMESTAMP, outside_records, parse_time
from ..rpc.address import default_address
from ..rpc.client import BYTES_MARKER, Client
from ..rpc.methods import PARAMS

TEXT_PARAMS = frozenset({"topic", "mode", "token", "group", "isolation"})
# Integers in this range read as epoch seconds from 2001-09-09 to the year 5138, but as milliseconds
# they are instants of 1970-01-12 to 1973-03-03, before Kafka existed: almost surely seconds.
EPOCH_SECONDS = range(10**9, 10**11)
_INTEGER = re.compile(r"-?[0-9]+")


def parse_arg(text: str) -> Any:
    """A param this client has no rule for: its JSON value when it parses, else the string itself."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _time(value: Any, hint: Callable[[str], None]) -> Any:
    """A timestamp param: an integer is passed as it is (the daemon judges it), text is read as a time."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value in EPOCH_SECONDS:
            when = datetime.fromtimestamp(value, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            hint(f"{value} looks like epoch seconds; timestamps are epoch milliseconds ({value * 1000} is {when}) "
                 f"or ISO 8601 ({when})")
        return value
    if isinstance(value, str):
        return int(value) if _INTEGER.fullmatch(value) else parse_time(value)
    return value


def parse_params(method: str, args: list[str], hint: Callable[[str], None]) -> list[Any]:
    """The params to send for `args` on the command line (see the module docstring); `hint` gets advice."""
    names = PARAMS.get(method, ())
    out: list[Any] = []
    for i, text in enumerate(args):
        name = names[i] if i < len(names) else None
        if name in TEXT_PARAMS:
            out.append(text)
        elif name == "timestamp":
            out.append(_time(parse_arg(text), hint))
        elif name == "timestamps":
            values = parse_arg(text)
            if not isinstance(values, list):
                raise InvalidArgument(f"timestamps must be a JSON list such as '[1767261600000, \"-1h\"]', got {text!r}")
            out.append([_time(v, hint) for v in values])
        else:
            out.append(parse_arg(text))
    return out


def to_json(value: Any) -> str:
    def encode(v: Any) -> Any:
        if isinstance(v, (bytes, bytearray)):
            return {BYTES_MARKER: base64.b64encode(v).decode()}
        raise TypeError(f"cannot print a {type(v).__name__}")
    return json.dumps(value, default=encode, indent=2)


def run(args) -> int:
    """Print the answer as JSON; errors exit 1 (through the cli), a missing METHOD 2."""
    if args.method is None:
        print(f"lookupd query: give a METHOD: {', '.join(PARAMS)} (`lookupd query --help` shows their params)",
              file=sys.stderr)
        return 2
    hints: list[str] = []
    params = parse_params(args.method, args.args, hints.append)
    for line in dict.fromkeys(hints):
        print(f"lookupd query: {line}", file=sys.stderr)
    token = None
    if args.token_file:
        with open(args.token_file, encoding="utf-8") as f:
            token = f.read().strip()
    with Client(args.socket or default_address(), token=token, timeout=args.timeout, tls_ca=args.tls_ca,
                tls_cert=args.tls_cert, tls_key=args.tls_key) as client:
        result = client.call(args.method, *params)
        why = _why_none(client, args.method, params) if result is None else None
    sys.stdout.write(to_json(result) + "\n")
    if why is not None:
        print(f"lookupd query: {why}", file=sys.stderr)
    return 0


def _why_none(client: Client, method: str, params: list[Any]) -> str | None:
    """Why offset_for_timestamp found no record: the time is past every record (with the partition's first and
    largest timestamps, asked for once the answer is known to be none)."""
    if method != "offset_for_timestamp" or len(params) != 3 or not isinstance(params[2], int) or params[2] < 0:
        return None
    topic, partition, timestamp = params
    return outside_records(f"{topic}-{partition}", timestamp, None, client.offset_for_timestamp(topic, partition, 0),
                           client.offset_for_timestamp(topic, partition, MAX_TIMESTAMP))
