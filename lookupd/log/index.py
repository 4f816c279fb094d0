"""Offset and time indexes (Kafka's AbstractIndex, OffsetIndex, TimeIndex, LazyIndex), read-only.

An index is mapped on first use (the LazyIndex part) through a shared `IndexCache` that
keeps a bounded number mapped. Files are opened `O_RDONLY` and mapped `PROT_READ`: nothing
here can write to a broker's files.

Valid entries. A rolled segment's index is trimmed to its entries. The active segment's
index is preallocated with a zero-filled tail that Kafka's own read-only reopen counts as
entries; here the tail is cut off (an all-zero entry after slot 0 can never be real, since
keys strictly increase), and for the live segment so is any entry whose position is not
yet inside the `.log` (offset index) or whose offset is beyond the last valid offset-index
entry (time index). Entries the broker appends are picked up by the next lookup.

A follower's truncation leaves stale bytes behind: Kafka's truncateToEntries only moves its
in-memory entry count, so after a truncation and a new fetch the live index holds the new
entries followed by old ones. For the live segment, an entry out of order therefore ends
the valid range (it is no corruption), and the offset index's entries are checked against
the `.log` (the segment's `verify`: a batch starts at the entry's position and holds its
offset); the first that fails ends the valid range too, until the broker writes that slot again.

Never a SIGBUS. Touching a mapped page past end-of-file kills the process, and the broker
shrinks the active index when it rolls. Each lookup first checks the file still covers the
valid entries (one `pread` or `fstat`) and remaps a file that shrank. The remaining race,
a truncation between that check and the read, is absorbed by the SIGBUS guard in `lookupd.log._native`: it
maps a zero page over the faulting page, the search's answer is discarded and the file
remapped. Without that C module (pure Python) no file is mapped: searches read a copy taken with
pread (lookupd.log.mapping's IndexCopy), and a shrink found after a search discards its answer
just the same.

The index classes hold the mapped-file state (the SIGBUS protocol, which entries are valid, live
following; the map itself and its lifetime are lookupd.log.mapping's); the searches themselves
are pure functions over a buffer of entries in lookupd.log.search, as h11 keeps its readers apart
from its connection.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import time
from typing import TYPE_CHECKING, Callable, TypeVar

import numpy as np

from ..errors import INT64_MAX, INT64_MIN, CorruptIndexError
from .search import Layout, bulk_slots, ceiling_slot, host_order_columns, kafka_slot
from .cache import tick
from .fileio import RefusedFile, WouldBlock, is_nonblocking, mode as _nonblocking, open_regular, regular_stat
from .mapping import NO_MAPPING, SIGBUS_GUARD, IndexBytes, IndexCopy, IndexMapping, IndexState, NoMapping, guard_faults, \
    map_index

from . import _accel  # without the C extension: Python searches, size checks before reads

if TYPE_CHECKING:
    from .cache import IndexCache

log = logging.getLogger(__name__)
T = TypeVar("T")

WARM_SECTION_BYTES = 8192
_PROBE_BYTES = 4096
_RETRIES = 5
# How long a mapping found resident is trusted before mincore is asked again: pages of an index
# being searched stay hot; one evicted meanwhile costs a page fault on the event loop at worst.
RESIDENCY_RECHECK_S = 0.05




class AbstractIndex:
    """A sparse, sorted index file of fixed-size entries, searched by key or by value."""

    ENTRY_SIZE: int
    KIND: str
    LAYOUT: Layout  # entry size and the key and value fields, for the search functions
    _KEY: struct.Struct  # key field at entry offset 0
    _VALUE: struct.Struct  # value field after the key
    _DTYPE: np.dtype

    def __init__(self, path: str | os.PathLike, base_offset: int, cache: IndexCache | None = None, *,
                 data: bytes | None = None):
        self.path = os.fspath(path)  # with `data`: a name for messages (the index is in memory, not in a file)
        self.base_offset = base_offset
        self._cache = cache
        self._data = data
        self.last_used = 0  # tick() of the last search (lookupd.log.cache)
        self._lock = threading.RLock()  # serialises (re)mapping; searches never take it
        self._state: IndexState | None = None
        self._live = False
        # Live only: whether an entry (absolute key, value) matches the `.log`, and the first slot
        # that did not with its bytes then (stale bytes ignored until the broker rewrites them).
        self._verify: Callable[[int, int], bool] | None = None
        self._rejected: tuple[int, bytes] | None = None
        self._checked: IndexState | None = None  # the last state whose last entry passed `_verify`
        # The `limit` that applies now (the segment's `limit_now`, see `set_limit_source`), or None: every
        # limit is taken as current. A lookup measures its limit first and searches after; see `_apply_limit`.
        self._limit_now: Callable[[], int | None] | None = None
        self._resident_checked: tuple[object, float] | None = None  # (mapping, when mincore said resident)
        self._host_order_cols: tuple[object, int, np.ndarray, np.ndarray] | None = None
        self.warm_entries = WARM_SECTION_BYTES // self.ENTRY_SIZE
        self._ZERO = bytes(self.ENTRY_SIZE)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path!r})"

    # ----------------------------------------------------------------- lifecycle

    @property
    def is_open(self) -> bool:
        return self._state is not None

    @property
    def mapped_bytes(self) -> int:
        st = self._state
        return st.mapping.length if st is not None else 0

    @property
    def fault(self) -> CorruptIndexError | None:
        """Why the index cannot be trusted, if it cannot (set when it is mapped or checked)."""
        st = self._state
        return st.fault if st is not None else None

    def close(self) -> None:
        """Unmap and close the file (a search still running keeps its map until it returns)."""
        self.unmap()
        if self._cache is not None:
            self._cache.forget(self)

    def unmap(self) -> None:
        """Drop the mapping; the next lookup maps the file again (what the cache's eviction calls)."""
        with self._lock:
            self._state = None
            self._host_order_cols = None

    def set_live(self, live: bool, verify: Callable[[int, int], bool] | None = None) -> None:
        """Mark whether this belongs to the active segment (whose index may still grow); `verify`
        checks a live entry against the `.log` (see the module docstring)."""
        self._verify = verify if live else None
        if live != self._live:
            with self._lock:
                self._live = live
                self._rejected = None
                self._checked = None
                if self._state is not None:
                    self._load()  # entries cut as "not yet valid" are judged again

    def set_limit_source(self, limit_now: Callable[[], int | None]) -> None:
        """What `limit` is now (the `.log`'s size, the last offset; None: no limit applies), so that a limit a
        lookup measured while the segment was active, used after it rolled, is not taken for corruption."""
        self._limit_now = limit_now

    def _ensure_open(self) -> IndexState:
        with self._lock:
            st = self._state
            fresh = st is None
            if fresh:
                st = self._load()
        if fresh and self._cache is not None:
            self._cache.opened(self)  # outside our lock: it may unmap other indexes
        return st

    def _load(self) -> IndexState:
        """(Re)map the file, work out its valid entries from scratch, and publish both at once."""
        if is_nonblocking():
            raise WouldBlock()  # mapping reads the whole file in: a worker thread's job
        for _ in range(_RETRIES):
            before = guard_faults()
            try:
                m = map_index(self.path) if self._data is None else IndexBytes(self._data)
            except RefusedFile as err:  # a symbolic link: not read, and the index is not to be trusted
                self._state = st = IndexState(NO_MAPPING, 0, CorruptIndexError(self.path, None, err.strerror))
                return st
            except FileNotFoundError:
                m = NO_MAPPING  # LazyIndex creates the file on first access; until then it is empty
            except ValueError:  # the file shrank between map_index's fstat and its map (or copy); look again
                continue
            if m.mm is None:
                st = IndexState(NO_MAPPING, 0, None)
            else:
                n = m.length // self.ENTRY_SIZE
                count, fault = self._ordered_prefix(m.mm, self._nonzero_prefix(m.mm, n))
                if self._live:
                    fault = None  # stale entries after a follower's truncation end the valid range
                    count = self._before_rejected(m, count)
                if m.length % self.ENTRY_SIZE and fault is None:
                    fault = CorruptIndexError(
                        self.path, n * self.ENTRY_SIZE,
                        f"{self.KIND} size {m.length} is not a multiple of the entry size {self.ENTRY_SIZE}")
                st = IndexState(m, count, fault)
            if guard_faults() == before:
                self._state = st
                return st
        raise CorruptIndexError(self.path, None, "the file kept shrinking while it was being read")

    def _reload(self, why: str) -> IndexState:
        with self._lock:
            log.info("%s %s: mapping it again", self.path, why)
            return self._load()

    def _publish(self, old: IndexState, new: IndexState) -> IndexState:
        """Replace `old` by `new` unless someone remapped meanwhile; returns what is current."""
        with self._lock:
            if self._state is old:
                self._state = new
                return new
            return self._state or old

    def _before_rejected(self, m: IndexMapping | IndexCopy, count: int) -> int:
        """`count` cut at the rejected slot while that slot still holds the bytes it was rejected with."""
        rej = self._rejected
        if rej is None or count <= rej[0]:
            return count
        start = rej[0] * self.ENTRY_SIZE
        if m.read(start, start + self.ENTRY_SIZE) == rej[1]:
            return rej[0]
        self._rejected = None  # the broker wrote that slot again
        return count

    def _check_against_log(self, st: IndexState) -> IndexState:
        """Live offset index: the valid entries, ended before the first whose batch the `.log` does not
        hold. New entries precede stale ones, so the boundary is found by bisection."""
        verify, mm, n = self._verify, st.mapping.mm, st.entries
        ok = lambda slot: verify(*self._absolute_entry(mm, slot))  # noqa: E731
        if ok(n - 1):
            self._checked = st
            return st
        st.mapping.refresh(0, n * self.ENTRY_SIZE)  # a copy (pure Python) then shows what a map would: the file now
        lo, hi = 0, n - 1
        while lo < hi:
            mid = (lo + hi) >> 1
            if ok(mid):
                lo = mid + 1
            else:
                hi = mid
        start = lo * self.ENTRY_SIZE
        self._rejected = (lo, bytes(mm[start:start + self.ENTRY_SIZE]))
        log.info("%s: entries from slot %d on are not in the log (left by a truncation); ignoring them", self.path, lo)
        cut = IndexState(st.mapping, lo, st.fault)
        self._publish(st, cut)
        self._checked = cut
        return cut

    def _absolute_entry(self, mm, slot: int) -> tuple[int, int]:
        return self._entry_raw(mm, slot)

    # ----------------------------------------------------------------- validity

    def _is_zero(self, mm, slot: int) -> bool:
        start = slot * self.ENTRY_SIZE
        return mm[start:start + self.ENTRY_SIZE] == self._ZERO

    def _nonzero_prefix(self, mm, n: int) -> int:
        """Entries before the preallocated zero tail (binary search: O(log n) page touches)."""
        if n <= 1:
            return n
        if not self._is_zero(mm, n - 1):
            return n
        lo, hi = 1, n - 1  # the first all-zero slot >= 1 lies in [lo, hi]
        while lo < hi:
            mid = (lo + hi) >> 1
            if self._is_zero(mm, mid):
                hi = mid
            else:
                lo = mid + 1
        if lo == 1 and self._is_zero(mm, 0):
            return 0  # preallocated and never written
        return lo

    def _columns(self, buf, count: int) -> tuple[np.ndarray, np.ndarray]:
        arr = np.frombuffer(buf, dtype=self._DTYPE, count=count)
        return arr["key"].astype(np.int64), arr["value"].astype(np.int64)

    def _ordered_prefix(self, mm, count: int) -> tuple[int, CorruptIndexError | None]:
        """The entries before the first one out of order, and the fault that entry is."""
        if count == 0:
            return 0, None
        keys, values = self._columns(mm, count)
        bad = self._disorder(keys, values)
        if bad is None:
            return count, None
        return bad, CorruptIndexError(self.path, bad * self.ENTRY_SIZE, self._disorder_reason(bad, keys, values))

    def _disorder(self, keys: np.ndarray, values: np.ndarray, prev: tuple[int, int] | None = None) -> int | None:
        """Slot (relative to `keys`) of the first entry that breaks the index's ordering, or None."""
        raise NotImplementedError

    def _disorder_reason(self, slot: int, keys: np.ndarray, values: np.ndarray) -> str:
        raise NotImplementedError

    def _beyond(self, value: int, limit: int) -> bool:
        """Whether an entry's value lies past what the `.log` holds (`limit`)."""
        raise NotImplementedError

    def _beyond_reason(self, mm, slot: int, limit: int) -> str:
        raise NotImplementedError

    # ----------------------------------------------------------------- safe access

    def _view(self, limit: int | None = None) -> IndexState:
        """A snapshot (mapping, valid entries, fault) covering entries inside the file right now.

        A live index first admits entries the broker appended. The file is checked to still
        hold the valid entries (see `_intact`); a shrunk file is remapped and revalidated.
        `limit` (log size for the offset index, max offset for the time index) drops
        entries past what the `.log` holds: not yet written for the live segment,
        corruption for a rolled one. Snapshots are immutable and published whole, so a
        search never pairs one mapping with another mapping's entry count.
        """
        st = self._state
        if is_nonblocking():
            self._check_resident(st)
        if st is None:
            st = self._ensure_open()
        else:
            self.last_used = tick()  # for the IndexCache's least-recently-used order
        if st.mapping.mm is None:
            st = self._reload_if_changed(st)
        elif not self._intact(st.mapping, st.entries):
            st = self._reload("shrank")
        elif self._live and not (SIGBUS_GUARD and self._nothing_appended(st)):
            st = self._follow(st)
        if limit is not None and st.entries and st.mapping.mm is not None:
            st = self._apply_limit(st, limit)
        if self._verify is not None and st.entries and st is not self._checked and st.mapping.mm is not None:
            st = self._check_against_log(st)
        return st

    def _check_resident(self, st: IndexState | None) -> None:
        """Non-blocking mode: raise WouldBlock unless the index is mapped and its pages are in memory.
        Residency is asked at most every RESIDENCY_RECHECK_S per mapping (one mincore)."""
        if st is None:
            raise WouldBlock()
        m = st.mapping
        now = time.monotonic()
        checked = self._resident_checked
        if checked is not None and checked[0] is m and now - checked[1] < RESIDENCY_RECHECK_S:
            return
        if not m.resident():
            raise WouldBlock()
        self._resident_checked = (m, now)

    def _intact(self, m: IndexMapping | IndexCopy | NoMapping, n: int) -> bool:
        """Whether the file still holds the first `n` entries.

        With the SIGBUS guard this is one mapped read: a file cut inside entry n-1's page
        reads back zeros there, one cut below that page faults and the guard maps zeros in,
        and an all-zero entry after slot 0 is never real. Without the guard, the file's size (`size()`).
        """
        if m.mm is None:
            return n == 0
        if SIGBUS_GUARD and n >= 2:
            start = (n - 1) * self.ENTRY_SIZE
            return m.mm[start:start + self.ENTRY_SIZE] != self._ZERO
        return m.size() >= n * self.ENTRY_SIZE

    def _nothing_appended(self, st: IndexState) -> bool:
        """The slot after the last valid entry is still zero (one mapped read, no system call)."""
        start = st.entries * self.ENTRY_SIZE
        return start + self.ENTRY_SIZE <= st.mapping.length and \
            st.mapping.mm[start:start + self.ENTRY_SIZE] == self._ZERO

    def _apply_limit(self, st: IndexState, limit: int) -> IndexState:
        """The entries within `limit`. Past it, a live index's entries are not yet written; a rolled one's are
        corruption, published with the state, unless `limit` is stale: a lookup measures the `.log` (or the
        last offset) first and searches after, and a segment that rolled in between (its last batches and
        their entries written, then trimmed and rolled) holds entries past what the lookup measured. That
        lookup answers from the entries within its limit, as for a live one, and leaves the state as it is:
        the issue-40 chaos failure was such a limit, from before a roll, taken for corruption and kept."""
        cut = self._first_beyond(st.mapping.mm, st.entries, limit)
        if cut == st.entries:
            return st
        fault = st.fault
        if not self._live and fault is None:
            now = limit if self._limit_now is None else self._limit_now()
            if now is None or now > limit:
                return IndexState(st.mapping, cut, fault)  # a stale limit: this lookup's view, not published
            fault = CorruptIndexError(self.path, cut * self.ENTRY_SIZE, self._beyond_reason(st.mapping.mm, cut, limit))
        new = IndexState(st.mapping, cut, fault)
        self._publish(st, new)
        return new

    def _reload_if_changed(self, st: IndexState) -> IndexState:
        if self._data is not None:
            return st  # in memory: it never changes
        try:
            size = regular_stat(self.path).st_size
        except FileNotFoundError:  # RefusedFile too: mapping it reports why
            size = 0
        return self._reload("appeared") if size else st

    def _follow(self, st: IndexState) -> IndexState:
        """Admit entries appended since the last look (live index)."""
        E = self.ENTRY_SIZE
        m = st.mapping
        while True:
            n = st.entries
            size = m.size()
            if size < n * E:
                return self._reload("shrank")
            if n and m.rewritten((n - 1) * E, n * E):  # a copy (pure Python) behind a truncation and new writes
                m.refresh(0, n * E)  # what a map shows: entries it held stale are checked against the `.log`
                st = self._publish(st, IndexState(m, n, st.fault))
                if st.mapping is not m:
                    return st
            end = min(size, m.length) // E * E
            if end <= n * E:
                return self._reload("grew past its mapping") if size > m.length else st
            chunk = m.read(n * E, min(end, n * E + _PROBE_BYTES))
            if chunk[:E] == self._ZERO or self._before_rejected(m, n + 1) == n:
                return st
            k = len(chunk) // E
            keys, values = self._columns(chunk, k)
            zero = (keys == 0) & (values == 0)
            if n == 0:
                zero[0] = False
            z = int(np.argmax(zero)) if zero.any() else k
            bad = self._disorder(keys[:z], values[:z], self._entry_raw(m.mm, n - 1) if n else None)
            good = z if bad is None else bad
            new = self._publish(st, IndexState(m, n + good, st.fault))
            if new.mapping is not m or good < k:
                return new
            st = new

    def _first_beyond(self, mm, n: int, limit: int) -> int:
        """First slot whose value lies beyond `limit`, n if none (the last entry is checked first)."""
        E, skip, unpack = self.ENTRY_SIZE, self._KEY.size, self._VALUE.unpack_from
        if not self._beyond(unpack(mm, (n - 1) * E + skip)[0], limit):
            return n
        lo, hi = 0, n - 1
        while lo < hi:
            mid = (lo + hi) >> 1
            if self._beyond(unpack(mm, mid * E + skip)[0], limit):
                hi = mid
            else:
                lo = mid + 1
        return lo

    def run_search(self, search: Callable[[object, int], T], *, limit: int | None = None) -> T:
        """Run a pure search (lookupd.log.search) as `search(buffer, valid entries)` over the checked
        entries; redone if the file shrank meanwhile."""
        return self._run(limit, search)

    def _run(self, limit: int | None, search: Callable[[object, int], T]) -> T:
        """Run `search(mm, n)` over checked entries; redo it if the file shrank meanwhile."""
        for _ in range(_RETRIES):
            before = guard_faults()
            st = self._view(limit)
            if st.fault is not None:
                raise st.fault
            result = search(st.mapping.mm, st.entries)
            if guard_faults() == before and self._intact(st.mapping, st.entries):
                return result
            self._reload("was truncated while being read")
        raise CorruptIndexError(self.path, None, "the file kept shrinking while it was being read")

    def native_view(self) -> IndexState | None:
        """The current state when the native one-call searches may use it: mapped, sound and, if live,
        checked against the `.log`, with at least 2 entries (`_accel.entry` says why); None when `_run`
        must answer, and while a reference path runs (`_accel.mode.python`). In non-blocking mode,
        WouldBlock unless its pages are in memory (as `_view`)."""
        st = self._state
        if st is None or st.entries < 2 or st.fault is not None or not SIGBUS_GUARD or _accel.mode.python or \
                (self._verify is not None and st is not self._checked):
            return None
        if _nonblocking.on:  # as _view does: WouldBlock unless the pages are in memory
            checked = self._resident_checked  # (the first test of _check_resident, without its call)
            if checked is None or checked[0] is not st.mapping or \
                    time.monotonic() - checked[1] >= RESIDENCY_RECHECK_S:
                self._check_resident(st)
        self.last_used = tick()  # for the IndexCache's least-recently-used order
        return st

    def _entry_fast(self, target: int, ceiling: bool, value_limit: int) -> tuple[int, int, int] | None:
        """(slot, key, value) of the floor (`ceiling`: least >=) entry by key, slot -1 if none, in one native
        call (`_accel.entry`), entries with a value >= `value_limit` being past the `.log`; None when `_run`
        must answer (see `native_view`, in doubt, or while a reference path runs)."""
        if not INT64_MIN <= target <= INT64_MAX:
            return None
        st = self.native_view()
        if st is None:
            return None
        return _accel.entry(st.mapping.mm, st.entries, self.ENTRY_SIZE, self._KEY.size, target, self.warm_entries,
                             ceiling, value_limit, self._live)

    def _entry_raw(self, mm, slot: int) -> tuple[int, int]:
        start = slot * self.ENTRY_SIZE
        return self._KEY.unpack_from(mm, start)[0], self._VALUE.unpack_from(mm, start + self._KEY.size)[0]

    def _peek(self) -> tuple[int, bytes] | None:
        """(whole entries in the file, the last one's bytes, b"" when there are none) read without
        mapping, or None when the index is mapped already, missing, or ends in a preallocated zero tail."""
        if self._state is not None or self._data is not None:
            return None
        if is_nonblocking():
            raise WouldBlock()
        try:
            fd, st = open_regular(self.path)
        except FileNotFoundError:  # RefusedFile too: mapping it reports why
            return None
        try:
            n = st.st_size // self.ENTRY_SIZE
            raw = os.pread(fd, self.ENTRY_SIZE, (n - 1) * self.ENTRY_SIZE) if n else b""
        finally:
            os.close(fd)
        if n == 0:
            return 0, b""  # empty: no entries, and no last one
        if len(raw) != self.ENTRY_SIZE or raw == self._ZERO:
            return None
        return n, raw

    def peek_entries(self) -> int | None:
        """Entries of a trimmed (rolled) index from its size, without mapping it; None if unsure."""
        peeked = self._peek()
        return None if peeked is None else peeked[0]

    # ----------------------------------------------------------------- counts

    @property
    def entries(self) -> int:
        """Valid entries right now (Kafka's `entries()` minus any preallocated tail)."""
        return self._view().entries

    def valid_entries(self, *, limit: int | None = None) -> int:
        """Valid entries given `limit`; never raises for corruption (see `fault`)."""
        return self._view(limit).entries

    def sanity_check(self, *, limit: int | None = None) -> None:
        """Raise CorruptIndexError if the index breaks Kafka's rules (as `--index-sanity-check`)."""
        self._run(limit, lambda mm, n: None)

    # ----------------------------------------------------------------- searching

    def _kafka_slot(self, mm, n: int, target: int, by_value: bool, upper: bool) -> int:
        return kafka_slot(mm, n, self.LAYOUT, target, by_value, upper, self.warm_entries)

    def slot_for(self, target: int, *, by_value: bool = False, upper: bool = False,
                 limit: int | None = None) -> int:
        """Kafka's largestLowerBoundSlotFor / smallestUpperBoundSlotFor, quirks included.

        (For a target equal to slot 0's key Kafka's upper bound answers slot 1; use
        `ceiling_slot` for a ceiling that is always right.) -1 when there is no such slot.
        """
        t = self._search_target(target, by_value)
        return self._run(limit, lambda mm, n: self._kafka_slot(mm, n, t, by_value, upper))

    def floor_slot(self, target: int, *, by_value: bool = False, limit: int | None = None) -> int:
        """Greatest slot whose key (or value) is <= target, -1 if none: warm-section search."""
        t = self._search_target(target, by_value)
        return self._run(limit, lambda mm, n: self._kafka_slot(mm, n, t, by_value, False))

    def ceiling_slot(self, target: int, *, by_value: bool = False, limit: int | None = None) -> int:
        """Least slot whose key (or value) is >= target, -1 if none."""
        return self._run(limit, self._ceiling_search(self._search_target(target, by_value), by_value))

    def _ceiling_search(self, t: int, by_value: bool) -> Callable[[object, int], int]:
        """A search(mm, n) for the least slot whose key (or value) is >= t (a search target), -1 if none."""
        layout, warm = self.LAYOUT, self.warm_entries
        return lambda mm, n: ceiling_slot(mm, n, layout, t, by_value, warm)

    def _search_target(self, target: int, by_value: bool) -> int:
        return target

    def _value_limit(self, limit: int | None) -> int:
        """`limit` as `_entry_fast`'s bound on an entry's raw value (INT64_MAX: none)."""
        return INT64_MAX if limit is None else limit

    def ceiling_entry(self, target: int, *, limit: int | None = None) -> tuple[int, int] | None:
        """The entry (as `entry` gives it) with the least key >= target, None if none: ceiling_slot
        and entry in one look at the index (one native call when the index allows it)."""
        t = self._search_target(target, False)
        found = self._entry_fast(t, True, self._value_limit(limit))
        if found is not None:
            return self._absolute(found[1], found[2]) if found[0] >= 0 else None
        ceiling = self._ceiling_search(t, False)

        def search(mm, n):
            slot = ceiling(mm, n)
            return self._absolute(*self._entry_raw(mm, slot)) if slot >= 0 else None

        return self._run(limit, search)

    def _entry_at(self, slot: int, limit: int | None) -> tuple[int, int]:
        def search(mm, n):
            if not 0 <= slot < n:
                raise IndexError(f"{self.path}: entry {slot} requested, the index has {n}")
            return self._entry_raw(mm, slot)

        return self._run(limit, search)

    # ----------------------------------------------------------------- vectorised

    def _host_order_columns(self, mm, n: int) -> tuple[np.ndarray, np.ndarray]:
        """`host_order_columns` of the first `n` entries of map `mm`, kept while the index stays mapped
        (what bulk searches run on)."""
        cols = self._host_order_cols
        if cols is None or cols[0] is not mm or cols[1] != n:
            cols = (mm, n, *host_order_columns(mm, n, self._DTYPE))
            self._host_order_cols = cols
        return cols[2], cols[3]

    def _bulk(self, targets, limit: int | None, ceiling: bool):
        """(slots, none-mask, keys, values) for many search keys at once."""
        t = self._search_targets(np.asarray(targets, dtype=np.int64))

        def search(mm, n):
            keys, values = self._host_order_columns(mm, n)
            return (*bulk_slots(keys, t, ceiling), keys, values)

        return self._run(limit, search)

    def floor_slots(self, targets, *, limit: int | None = None) -> np.ndarray:
        """Vectorised floor_slot for many keys at once (-1 where none)."""
        slots, _, _, _ = self._bulk(targets, limit, False)
        return slots

    def ceiling_slots(self, targets, *, limit: int | None = None) -> np.ndarray:
        """Vectorised ceiling_slot for many keys at once (-1 where none)."""
        slots, none, _, _ = self._bulk(targets, limit, True)
        slots[none] = -1
        return slots

    def _search_targets(self, targets: np.ndarray) -> np.ndarray:
        return targets

    def _gather(self, targets, limit: int | None, ceiling: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Keys and values (as int64) of the floor/ceiling entry per target, and where there is none."""
        slots, none, keys, values = self._bulk(targets, limit, ceiling)
        if len(keys) == 0:
            z = np.zeros(len(slots), np.int64)
            return z, z.copy(), np.ones(len(slots), bool)
        safe = np.where(none, 0, slots)
        return keys[safe].astype(np.int64), values[safe].astype(np.int64), none

    # ----------------------------------------------------------------- whole-file views

    def entries_array(self, *, limit: int | None = None, include_invalid: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """(keys, values) as int64 arrays in absolute terms: the valid entries.

        With `include_invalid`, every whole entry in the file (what Kafka's reopen would see).
        """
        def search(mm, n):
            if include_invalid and mm is not None:
                n = len(mm) // self.ENTRY_SIZE
            if mm is None or n == 0:
                return np.empty(0, np.int64), np.empty(0, np.int64)
            return self._absolute(*self._columns(mm, n))

        st = self._view(limit)  # corruption does not stop a dump: the valid prefix is shown
        return search(st.mapping.mm, st.entries)

    def _absolute(self, keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return keys, values


class OffsetIndex(AbstractIndex):
    """`.index`: int32 offset relative to the base offset -> int32 byte position in the `.log`."""

    ENTRY_SIZE = 8
    KIND = "offset index"
    _KEY = struct.Struct(">i")
    _VALUE = struct.Struct(">i")
    LAYOUT = Layout(ENTRY_SIZE, _KEY, _VALUE)
    _DTYPE = np.dtype([("key", ">i4"), ("value", ">i4")])

    def _search_target(self, target: int, by_value: bool) -> int:
        return target if by_value else target - self.base_offset

    def _search_targets(self, targets: np.ndarray) -> np.ndarray:
        return targets - self.base_offset

    def _absolute(self, keys, values):
        return keys + self.base_offset, values

    def _absolute_entry(self, mm, slot: int) -> tuple[int, int]:
        rel, position = self._entry_raw(mm, slot)
        return self.base_offset + rel, position

    def _disorder(self, keys, values, prev=None):
        if len(keys) == 0:
            return None
        if prev is None:
            first_bad = keys[0] < 0 or values[0] < 0
        else:
            first_bad = keys[0] <= prev[0] or values[0] <= prev[1]
        if first_bad:
            return 0
        bad = (np.diff(keys) <= 0) | (np.diff(values) <= 0)
        return int(np.argmax(bad)) + 1 if bad.any() else None

    def _disorder_reason(self, slot, keys, values):
        here = f"entry {slot} (offset {self.base_offset + int(keys[slot])}, position {int(values[slot])})"
        if slot == 0:
            return f"{here} has a negative relative offset or position"
        return (f"{here} is not after entry {slot - 1} (offset {self.base_offset + int(keys[slot - 1])}, "
                f"position {int(values[slot - 1])}): entries out of order")

    def _beyond(self, position, log_size):
        return position >= log_size

    def _beyond_reason(self, mm, slot, log_size):
        rel, pos = self._entry_raw(mm, slot)
        return (f"entry {slot} (offset {self.base_offset + rel}) points to position {pos}, "
                f"past the end of the log ({log_size} bytes)")

    def entry_before_position(self, position: int) -> tuple[int, int] | None:
        """(offset, position) of the entry before the last one whose position is <= `position`, None if there
        is none: an entry is a batch's position, so the batch there ends at or before `position`."""
        def search(mm, n):
            slot = self._kafka_slot(mm, n, position, True, False) - 1
            return self._absolute_entry(mm, slot) if slot >= 0 else None

        return self._run(None, search)

    def lookup(self, target_offset: int, *, limit: int | None = None) -> tuple[int, int]:
        """OffsetIndex.lookup: (offset, position) of the floor entry, (base offset, 0) if none."""
        t = target_offset - self.base_offset
        found = self._entry_fast(t, False, self._value_limit(limit))
        if found is not None:
            return (self.base_offset + found[1], found[2]) if found[0] >= 0 else (self.base_offset, 0)

        def search(mm, n):
            slot = self._kafka_slot(mm, n, t, False, False)
            if slot < 0:
                return self.base_offset, 0
            rel, pos = self._entry_raw(mm, slot)
            return self.base_offset + rel, pos

        return self._run(limit, search)

    def lookup_many(self, targets, *, limit: int | None = None, ceiling: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Vectorised lookup: (offsets, positions) per target.

        Floor: like `lookup`, (base offset, 0) where no entry is <= the target. Ceiling: the
        least entry >= the target, (-1, -1) where there is none.
        """
        keys, positions, none = self._gather(targets, limit, ceiling)
        offsets = keys + self.base_offset
        offsets[none] = -1 if ceiling else self.base_offset
        positions[none] = -1 if ceiling else 0
        return offsets, positions

    def entry(self, n: int, *, limit: int | None = None) -> tuple[int, int]:
        """(offset, position) of slot `n`."""
        rel, pos = self._entry_at(n, limit)
        return self.base_offset + rel, pos

    def last_offset(self, *, limit: int | None = None) -> int:
        """Offset of the last valid entry, the base offset when empty."""
        found = self._entry_fast(INT64_MAX, False, self._value_limit(limit))  # floor of all: the last
        if found is not None:
            return self.base_offset + found[1]
        return self._run(limit, lambda mm, n: self.base_offset + self._entry_raw(mm, n - 1)[0] if n else self.base_offset)

    def fetch_upper_bound_offset(self, fetch_position: int, fetch_size: int, *,
                                 limit: int | None = None) -> tuple[int, int] | None:
        """OffsetIndex.fetchUpperBoundOffset: first entry at or after position+size (Kafka's search)."""
        def search(mm, n):
            slot = self._kafka_slot(mm, n, fetch_position + fetch_size, True, True)
            if slot < 0:
                return None
            rel, pos = self._entry_raw(mm, slot)
            return self.base_offset + rel, pos

        return self._run(limit, search)


class TimeIndex(AbstractIndex):
    """`.timeindex`: int64 timestamp -> int32 offset relative to the base offset."""

    ENTRY_SIZE = 12
    KIND = "time index"
    _KEY = struct.Struct(">q")
    _VALUE = struct.Struct(">i")
    LAYOUT = Layout(ENTRY_SIZE, _KEY, _VALUE)
    _DTYPE = np.dtype([("key", ">i8"), ("value", ">i4")])

    def _search_target(self, target: int, by_value: bool) -> int:
        return target - self.base_offset if by_value else target

    def _absolute(self, keys, values):
        return keys, values + self.base_offset

    def _value_limit(self, limit: int | None) -> int:
        """Entries pointing past `limit` (the segment's last offset) hold relative offsets >= this."""
        return INT64_MAX if limit is None else min(limit - self.base_offset + 1, INT64_MAX)

    def _disorder(self, keys, values, prev=None):
        if len(keys) == 0:
            return None
        if prev is None:
            first_bad = values[0] < 0
        else:
            first_bad = keys[0] <= prev[0] or values[0] < prev[1]
        if first_bad:
            return 0
        bad = (np.diff(keys) <= 0) | (np.diff(values) < 0)
        return int(np.argmax(bad)) + 1 if bad.any() else None

    def _disorder_reason(self, slot, keys, values):
        here = f"entry {slot} (timestamp {int(keys[slot])}, offset {self.base_offset + int(values[slot])})"
        if slot == 0:
            return f"{here} has a negative relative offset"
        return (f"{here} does not follow entry {slot - 1} (timestamp {int(keys[slot - 1])}, offset "
                f"{self.base_offset + int(values[slot - 1])}): timestamps must increase and offsets not decrease")

    def _beyond(self, rel_offset, max_offset):
        return rel_offset > max_offset - self.base_offset

    def _beyond_reason(self, mm, slot, max_offset):
        ts, rel = self._entry_raw(mm, slot)
        return (f"entry {slot} (timestamp {ts}) points to offset {self.base_offset + rel}, "
                f"past the last offset of the segment ({max_offset})")

    def lookup(self, target_timestamp: int, *, limit: int | None = None) -> tuple[int, int]:
        """TimeIndex.lookup: (timestamp, offset) of the floor entry, (-1, base offset) if none."""
        found = self._entry_fast(target_timestamp, False, self._value_limit(limit))
        if found is not None:
            return (found[1], self.base_offset + found[2]) if found[0] >= 0 else (-1, self.base_offset)

        def search(mm, n):
            slot = self._kafka_slot(mm, n, target_timestamp, False, False)
            if slot < 0:
                return -1, self.base_offset
            ts, rel = self._entry_raw(mm, slot)
            return ts, self.base_offset + rel

        return self._run(limit, search)

    def lookup_fast(self, target_timestamp: int, limit: int | None = None) -> tuple[int, int] | None:
        """`lookup(target_timestamp, limit=limit)` in one native call, None when `lookup` must answer."""
        found = self._entry_fast(target_timestamp, False, INT64_MAX if limit is None else self._value_limit(limit))
        if found is None:
            return None
        return (found[1], self.base_offset + found[2]) if found[0] >= 0 else (-1, self.base_offset)

    def lookup_many(self, targets, *, limit: int | None = None, ceiling: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Vectorised lookup: (timestamps, offsets) per target.

        Floor: like `lookup`, (-1, base offset) where no entry is <= the target. Ceiling: the
        least entry >= the target, (-1, -1) where there is none.
        """
        timestamps, rel, none = self._gather(targets, limit, ceiling)
        offsets = rel + self.base_offset
        timestamps[none] = -1
        offsets[none] = -1 if ceiling else self.base_offset
        return timestamps, offsets

    def entry(self, n: int, *, limit: int | None = None) -> tuple[int, int]:
        """(timestamp, offset) of slot `n`."""
        ts, rel = self._entry_at(n, limit)
        return ts, self.base_offset + rel

    def peek_last_entry(self) -> tuple[int, int] | None:
        """The file's last whole entry via one `pread`, without mapping the index.

        For a rolled segment this is its max timestamp (added when it rolled), which is all
        a timestamp search needs to pick a segment. None when the index is already mapped,
        missing, empty or ends in a preallocated zero tail: use `last_entry` then.
        """
        peeked = self._peek()
        if peeked is None or not peeked[0]:
            return None
        ts, rel = self._entry_raw(peeked[1], 0)
        return ts, self.base_offset + rel

    def last_entry(self, *, limit: int | None = None) -> tuple[int, int]:
        """TimeIndex.lastEntry over valid entries: (-1, base offset) when empty."""
        def search(mm, n):
            if n == 0:
                return -1, self.base_offset
            ts, rel = self._entry_raw(mm, n - 1)
            return ts, self.base_offset + rel

        return self._run(limit, search)
