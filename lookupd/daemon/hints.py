"""What an UNKNOWN_PARTITION answer adds to say what to do: the partitions a served topic has, or the
topic names nearest a mistyped one, among those the caller may describe (an [[acl]] hides the others)."""

from __future__ import annotations

import difflib
from typing import Callable, Iterable

# Topic names compared with a mistyped one (difflib costs ~15 us a name; past this many the first ones in
# name order are compared, keeping the error's cost within ~150 ms of a worker thread).
MAX_TOPICS_COMPARED = 10_000
NEAREST = 3  # names suggested
CUTOFF = 0.6  # difflib's similarity below which a name is not suggested
MAX_PARTITIONS_LISTED = 20


def _ranges(numbers: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2, 5' (the first MAX_PARTITIONS_LISTED runs)."""
    runs: list[list[int]] = []
    for n in sorted(numbers):
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    text = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs[:MAX_PARTITIONS_LISTED])
    return text + (", ..." if len(runs) > MAX_PARTITIONS_LISTED else "")


def unknown_partition_hint(topic: str, served: Iterable[tuple[str, int]], may_describe: Callable[[str], bool]) -> str:
    """The sentence to add to UNKNOWN_PARTITION for `topic`, given the (topic, partition)s served."""
    partitions: dict[str, list[int]] = {}
    for t, p in served:
        if may_describe(t):
            partitions.setdefault(t, []).append(p)
    if topic in partitions:
        return f"topic {topic} has partitions {_ranges(partitions[topic])}"
    names = sorted(partitions)[:MAX_TOPICS_COMPARED]
    near = difflib.get_close_matches(topic, names, NEAREST, CUTOFF)
    if near:
        return f"nearest topics: {', '.join(near)}"
    return "no topic served has a name near it (the partitions method lists them)"
