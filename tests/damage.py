"""Random damage to log bytes, for the tests that check a native parser against its Python reference."""

from __future__ import annotations

import random


def damaged(rnd: random.Random, data: bytes, max_edits: int) -> bytearray:
    """`data` with 1 to max_edits edits at random places: a byte changed (60%), up to 8 bytes deleted (20%) or
    up to 8 random bytes inserted (20%)."""
    b = bytearray(data)
    for _ in range(rnd.randint(1, max_edits)):
        i = rnd.randrange(len(b))
        op = rnd.random()
        if op < 0.6:
            b[i] = rnd.randrange(256)
        elif op < 0.8:
            del b[i:i + rnd.randint(1, 8)]
        else:
            b[i:i] = bytes(rnd.randrange(256) for _ in range(rnd.randint(1, 8)))
    return b
