"""The byte edits both fuzzers damage their inputs with (bench/fuzz/fuzz_decode.py, fuzz_offsets.py)."""

from __future__ import annotations

import random

BOUNDARY = (0, 1, 0x7F, 0x80, 0xFF, 0xFE)  # byte values at the edges of signs, varints and lengths
BYTE_EDITS = 5


def edit(rnd: random.Random, b: bytearray, i: int, op: int) -> None:
    """Edit number `op` (of BYTE_EDITS) at b[i]: 0 a bit flipped, 1 the byte set to a boundary value, 2 up to 16
    bytes cut, 3 up to 16 random bytes inserted, 4 up to 64 bytes from elsewhere in b inserted (duplicated)."""
    if op == 0:
        b[i] ^= 1 << rnd.randrange(8)
    elif op == 1:
        b[i] = rnd.choice(BOUNDARY)
    elif op == 2:
        del b[i:i + rnd.randint(1, 16)]
    elif op == 3:
        b[i:i] = rnd.randbytes(rnd.randint(1, 16))
    else:
        j = rnd.randrange(len(b))
        b[i:i] = b[j:j + rnd.randint(1, 64)]
