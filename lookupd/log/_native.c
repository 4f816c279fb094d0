/*
 * C helpers for lookupd: the SIGBUS guard for read-only index maps, and Kafka's index
 * slot search over a mapped index (the same algorithm as index.py's Python fallback).
 *
 * SIGBUS guard.
 *
 * Reading a mapped page that lies past the end of its file raises SIGBUS, which kills a
 * Python process. The broker shrinks index files (it trims the active index when it rolls),
 * so a reader that checked the size a moment before can still lose that race.
 *
 * This module installs a SIGBUS handler that, for an address inside a registered index
 * map, maps an anonymous zero page over the faulting page and returns: the interrupted read
 * completes (it sees zeros) and a global fault counter goes up. Python code reads the
 * counter before and after each search and, if it moved, discards the answer and remaps
 * the file. Faults anywhere else are passed to the previous handler (or the default
 * action), so behaviour outside index maps is unchanged.
 */
#define _GNU_SOURCE
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <errno.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include "../format/_kafka.h"    /* Kafka's format constants and big-endian readers */

#define MAX_RANGES 65536

static _Atomic uintptr_t range_start[MAX_RANGES];
static _Atomic uintptr_t range_end[MAX_RANGES];
static _Atomic size_t range_high;      /* slots [0, range_high) may be in use */
static _Atomic unsigned long fault_count;
static struct sigaction previous;
static int installed;
static uintptr_t page_mask;

static int
is_ours(uintptr_t addr)
{
    size_t n = atomic_load(&range_high);
    for (size_t i = 0; i < n; i++) {
        uintptr_t s = atomic_load(&range_start[i]);
        if (s != 0 && addr >= s && addr < atomic_load(&range_end[i]))
            return 1;
    }
    return 0;
}

static void
on_sigbus(int sig, siginfo_t *info, void *context)
{
    uintptr_t addr = (uintptr_t)info->si_addr;
    if (info->si_code == BUS_ADRERR && is_ours(addr)) {
        void *page = (void *)(addr & page_mask);
        if (mmap(page, ~page_mask + 1, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != MAP_FAILED) {
            atomic_fetch_add(&fault_count, 1);
            return;
        }
    }
    if (previous.sa_flags & SA_SIGINFO) {
        if (previous.sa_sigaction != NULL) {
            previous.sa_sigaction(sig, info, context);
            return;
        }
    } else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
        previous.sa_handler(sig);
        return;
    }
    /* Default action: returning re-executes the access, which now kills the process. */
    signal(sig, SIG_DFL);
}

static PyObject *
guard_install(PyObject *self, PyObject *unused)
{
    if (!installed) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_sigbus;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigemptyset(&sa.sa_mask);
        page_mask = ~((uintptr_t)sysconf(_SC_PAGESIZE) - 1);
        if (sigaction(SIGBUS, &sa, &previous) != 0)
            return PyErr_SetFromErrno(PyExc_OSError);
        installed = 1;
    }
    Py_RETURN_NONE;
}

static PyObject *
guard_register(PyObject *self, PyObject *args)
{
    unsigned long long start, length;
    if (!PyArg_ParseTuple(args, "KK", &start, &length))
        return NULL;
    size_t high = atomic_load(&range_high);
    for (size_t i = 0; i < MAX_RANGES; i++) {
        if (i < high && atomic_load(&range_start[i]) != 0)
            continue;
        atomic_store(&range_end[i], (uintptr_t)(start + length));
        atomic_store(&range_start[i], (uintptr_t)start);
        if (i >= high)
            atomic_store(&range_high, i + 1);
        return PyLong_FromSize_t(i);
    }
    return PyLong_FromLong(-1); /* full: the map stays unguarded, callers fall back to size checks */
}

static PyObject *
guard_unregister(PyObject *self, PyObject *arg)
{
    Py_ssize_t slot = PyLong_AsSsize_t(arg);
    if (slot == -1 && PyErr_Occurred())
        return NULL;
    if (slot >= 0 && slot < MAX_RANGES)
        atomic_store(&range_start[slot], 0);
    Py_RETURN_NONE;
}

static PyObject *
guard_faults(PyObject *self, PyObject *unused)
{
    return PyLong_FromUnsignedLong(atomic_load(&fault_count));
}

/* ---------------------------------------------------------------- index search */

/* A signed big-endian field of `width` bytes (4 or 8). */
static inline int64_t
read_be(const unsigned char *p, int width)
{
    return width == 8 ? (int64_t)be64(p) : (int64_t)(int32_t)be32(p);
}

/* The search arguments describe entries inside the buffer; else release it and raise ValueError. */
static int
search_fits(Py_buffer *view, Py_ssize_t n, Py_ssize_t entry_size, Py_ssize_t field_offset, int width)
{
    if (n < 0 || (width != 4 && width != 8) || field_offset + width > entry_size || n * entry_size > view->len) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_ValueError, "index search arguments do not fit the buffer");
        return 0;
    }
    return 1;
}

/*
 * AbstractIndex.indexSlotRangeFor over the field at `base` of n entries: check the first entry of the
 * warm section, then binary search the warm or the cold part. Returns the largest slot whose field
 * <= target (or -1), or with `upper` Kafka's smallest-upper-bound answer (quirks included).
 */
static Py_ssize_t
kafka_slot(const unsigned char *base, Py_ssize_t n, Py_ssize_t entry_size, int width, int64_t target,
           Py_ssize_t warm, int upper)
{
    if (n == 0)
        return -1;
    Py_ssize_t first_hot = n - 1 - warm > 0 ? n - 1 - warm : 0;
    Py_ssize_t lo, hi;
    if (read_be(base + first_hot * entry_size, width) < target) {
        lo = first_hot;
        hi = n - 1;
    } else if (read_be(base, width) > target) {
        return upper ? 0 : -1;
    } else {
        lo = 0;
        hi = first_hot;
    }
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi + 1) / 2;
        int64_t found = read_be(base + mid * entry_size, width);
        if (found > target)
            hi = mid - 1;
        else if (found < target)
            lo = mid;
        else
            return mid;
    }
    if (upper)
        return lo == n - 1 ? -1 : lo + 1;
    return lo;
}

static PyObject *
native_slot(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t n, entry_size, field_offset, warm;
    int width, upper;
    long long target;
    if (!PyArg_ParseTuple(args, "y*nnniLnp", &view, &n, &entry_size, &field_offset, &width, &target, &warm, &upper))
        return NULL;
    if (!search_fits(&view, n, entry_size, field_offset, width))
        return NULL;
    Py_ssize_t result = kafka_slot((const unsigned char *)view.buf + field_offset, n, entry_size, width, target,
                                   warm, upper);
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(result);
}

/*
 * entry(buffer, n, entry_size, key_width, target, warm_entries, ceiling, value_limit, live)
 *     -> (slot, key, value) | None
 *
 * An index lookup by key in one call, over an index whose first n entries were found valid: the
 * floor slot by Kafka's search (with `ceiling`, the least slot whose key >= target, as ceiling_slot),
 * and that entry's key and value ((-1, 0, 0) when there is none). The value is the int32 after the
 * key. None asks the caller for its full path, which sees the same thing and says what it is: n < 2,
 * the last valid entry reads as zeros (the file was cut, see index.py's `_intact`), its value is
 * >= value_limit (an entry past what the `.log` holds), a `live` index's slot n is not all zeros
 * or not in the buffer (the broker appended: `_nothing_appended`), or a SIGBUS was absorbed meanwhile.
 */
/* Argument `i` of a fast call as a C integer in [lo, hi]; else -1 with an exception set. */
static int
int_arg(PyObject *const *args, int i, long long lo, long long hi, long long *out)
{
    *out = PyLong_AsLongLong(args[i]);
    if (*out == -1 && PyErr_Occurred())
        return -1;
    if (*out < lo || *out > hi) {
        PyErr_Format(PyExc_ValueError, "argument %d is out of range", i + 1);
        return -1;
    }
    return 0;
}

/*
 * The floor (or, with `ceiling`, the least >= target) entry by key of an index whose first n entries of
 * entry_size bytes lie in buf[0, len), under the conditions `entry` documents. Returns 1 with *slot (-1
 * when there is none), *key and *value set, or 0 when the caller's full path must answer.
 */
static int
index_entry(const unsigned char *buf, Py_ssize_t len, Py_ssize_t n, Py_ssize_t entry_size, int key_width,
            int64_t target, Py_ssize_t warm, int ceiling, int64_t value_limit, int live,
            Py_ssize_t *slot, int64_t *key, int64_t *value)
{
    if (n < 2 || n > len / entry_size)
        return 0;
    unsigned long before = atomic_load(&fault_count);
    const unsigned char *last = buf + (n - 1) * entry_size;
    int usable = read_be(last + key_width, 4) < value_limit;
    if (usable) {
        usable = 0;
        for (Py_ssize_t i = 0; i < entry_size; i++)
            usable |= last[i];
    }
    if (usable && live) {
        const unsigned char *next = last + entry_size;
        usable = (n + 1) * entry_size <= len;
        for (Py_ssize_t i = 0; usable && i < entry_size; i++)
            usable = next[i] == 0;
    }
    if (!usable)
        return 0;
    Py_ssize_t s = kafka_slot(buf, n, entry_size, key_width, target, warm, 0);
    if (ceiling && !(s >= 0 && read_be(buf + s * entry_size, key_width) == target))
        s = s + 1 < n ? s + 1 : -1;
    *slot = s;
    *key = s >= 0 ? read_be(buf + s * entry_size, key_width) : 0;
    *value = s >= 0 ? read_be(buf + s * entry_size + key_width, 4) : 0;
    return atomic_load(&fault_count) == before;
}

static PyObject *
native_entry(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    long long n, entry_size, key_width, target, warm, value_limit;
    int ceiling, live;
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError, "entry() takes 9 arguments");
        return NULL;
    }
    if (int_arg(args, 1, 0, PY_SSIZE_T_MAX, &n) || int_arg(args, 2, 1, 1 << 16, &entry_size) ||
        int_arg(args, 3, 4, 8, &key_width) || int_arg(args, 4, LLONG_MIN, LLONG_MAX, &target) ||
        int_arg(args, 5, 0, PY_SSIZE_T_MAX, &warm) || int_arg(args, 7, LLONG_MIN, LLONG_MAX, &value_limit) ||
        (ceiling = PyObject_IsTrue(args[6])) < 0 || (live = PyObject_IsTrue(args[8])) < 0)
        return NULL;
    if (key_width != 4 && key_width != 8) {
        PyErr_SetString(PyExc_ValueError, "an index key is 4 or 8 bytes");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) != 0)
        return NULL;
    if (n > view.len / entry_size) {  /* checked first: n * entry_size below cannot overflow */
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "index search arguments do not fit the buffer");
        return NULL;
    }
    if (!search_fits(&view, n, entry_size, key_width, 4))
        return NULL;
    Py_ssize_t slot;
    int64_t key, value;
    int usable = index_entry(view.buf, view.len, n, entry_size, (int)key_width, target, warm, ceiling,
                             value_limit, live, &slot, &key, &value);
    PyBuffer_Release(&view);
    if (!usable)
        Py_RETURN_NONE;
    return Py_BuildValue("(nLL)", slot, (long long)key, (long long)value);
}

/* Textbook binary search for the largest slot whose field <= target (the benchmark's baseline). */
static PyObject *
native_plain_slot(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t n, entry_size, field_offset;
    int width;
    long long target;
    if (!PyArg_ParseTuple(args, "y*nnniL", &view, &n, &entry_size, &field_offset, &width, &target))
        return NULL;
    if (!search_fits(&view, n, entry_size, field_offset, width))
        return NULL;
    const unsigned char *base = (const unsigned char *)view.buf + field_offset;
    Py_ssize_t lo = 0, hi = n - 1;
    while (lo <= hi) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (read_be(base + mid * entry_size, width) <= target)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(hi);
}

/*
 * Residency: whether every page of [address, address + length) is in memory, so that reading it
 * cannot wait for the disk (mincore). The daemon answers a lookup on its event loop only when
 * the index pages it will search are resident; otherwise it hands the lookup to a worker thread.
 */
#define RESIDENT_VEC 4096

static PyObject *
native_resident(PyObject *self, PyObject *args)
{
    unsigned long long address;
    Py_ssize_t length;
    if (!PyArg_ParseTuple(args, "Kn", &address, &length))
        return NULL;
    if (length <= 0)
        Py_RETURN_TRUE;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t start = (uintptr_t)address & ~(page - 1);
    uintptr_t end = (uintptr_t)address + (uintptr_t)length;
    unsigned char vec[RESIDENT_VEC];
    while (start < end) {
        size_t pages = (end - start + page - 1) / page;
        if (pages > RESIDENT_VEC)
            pages = RESIDENT_VEC;
        if (mincore((void *)start, pages * page, vec) != 0)
            Py_RETURN_FALSE;  /* not a mapping we can ask about: take the safe answer */
        for (size_t i = 0; i < pages; i++)
            if (!(vec[i] & 1))
                Py_RETURN_FALSE;
        start += pages * page;
    }
    Py_RETURN_TRUE;
}

/* ------------------------------------------------------------------ the batch-header walk of a .log */

#define LAST_OFFSET_NEED (LAST_OFFSET_DELTA_AT + 4)  /* bytes of a header holding a v2 batch's last offset delta */
#define MAX_TIMESTAMP_NEED V2_HEADER                /* bytes of a header holding a v2 batch's max timestamp */

/*
 * The walk itself over buf[0, len), `end` bytes of log from buf[0]: sets *stop to the batch it stopped
 * at and returns whether that batch is the one looked for (see find_batch).
 */
static int
walk_headers(const unsigned char *buf, Py_ssize_t len, Py_ssize_t end, int64_t target, int by_timestamp,
             Py_ssize_t *stop)
{
    Py_ssize_t off = 0, need = by_timestamp ? MAX_TIMESTAMP_NEED : LAST_OFFSET_NEED;
    int found = 0;
    while (off < end - HEADER_UP_TO_MAGIC && off <= len - need) {
        const unsigned char *b = buf + off;
        int64_t size = read_be(b + 8, 4);
        if (size < RECORD_OVERHEAD_V0 || off > end - LOG_OVERHEAD - size)
            break;
        int magic = b[16];
        int64_t key;
        if (by_timestamp)
            key = magic >= 2 ? read_be(b + 35, 8) : magic == 1 ? read_be(b + 18, 8) : -1;
        else if (magic < 2)
            key = read_be(b, 8);
        else if (__builtin_add_overflow(read_be(b, 8), read_be(b + 23, 4), &key))
            break;
        if (key >= target) {
            found = 1;
            break;
        }
        off += (Py_ssize_t)size + LOG_OVERHEAD;
    }
    *stop = off;
    return found;
}

/*
 * find_batch(buffer, end, target, by_timestamp) -> (stop, found)
 *
 * FileRecords.searchForOffsetWithSize's walk (and searchForTimestamp's, by_timestamp) over the
 * batch headers in `buffer`, which holds the log from where the walk starts; `end` is how many
 * bytes of the log there are from there. Returns (offset in buffer, True) of the first batch
 * whose last offset (max timestamp: v2 field, v1 message timestamp, v0 none) is >= target, else
 * (offset, False) of the first batch it leaves to the caller: one whose header is not all in the
 * buffer, with a size below the minimum, running past `end`, starting fewer than 17 bytes before
 * `end`, or whose last offset is past int64. The caller's reference walk (read_frames) goes on
 * from there and makes the same decisions, errors included. Reads stay inside the buffer.
 */
static PyObject *
native_find_batch(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t end, off;
    long long target;
    int by_timestamp;
    if (!PyArg_ParseTuple(args, "y*nLp", &view, &end, &target, &by_timestamp))
        return NULL;
    int found = walk_headers(view.buf, view.len, end, target, by_timestamp, &off);
    PyBuffer_Release(&view);
    return Py_BuildValue("(nO)", off, found ? Py_True : Py_False);
}

/* ------------------------------------------------------------------ one call per lookup */

/* The chunks the walk reads, as filerecords.FIRST_SCAN_BYTES and HEADER_SCAN_BYTES (and for the same reasons). */
#define FIRST_CHUNK (4096 + 64)     /* one index interval (4 KiB by default) and a header more */
#define NEXT_CHUNK (16 * 1024)
#define WOULD_BLOCK (-2)

/*
 * Up to `size` bytes of fd at `pos` into buf, fewer only at end of file; -1 (errno set) on an error,
 * WOULD_BLOCK when `nowait` and the data is not in the page cache (preadv2 RWF_NOWAIT). A read that
 * may wait for the disk releases the GIL.
 */
static Py_ssize_t
read_at(int fd, unsigned char *buf, Py_ssize_t size, int64_t pos, int nowait)
{
    Py_ssize_t got = 0;
    while (got < size) {
        ssize_t r;
        if (nowait) {
#ifdef RWF_NOWAIT
            struct iovec iov = {buf + got, (size_t)(size - got)};
            r = preadv2(fd, &iov, 1, pos + got, RWF_NOWAIT);
            if (r < 0 && errno == EAGAIN)
                return WOULD_BLOCK;
#else
            return WOULD_BLOCK;
#endif
        } else {
            Py_BEGIN_ALLOW_THREADS
            r = pread(fd, buf + got, (size_t)(size - got), pos + got);
            Py_END_ALLOW_THREADS
        }
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (r == 0)
            break;
        got += r;
    }
    return got;
}

enum { LOCATE_ENTRY, LOCATE_BATCH, LOCATE_READ, LOCATE_TIME, LOCATE_CEILING };

/*
 * locate(kind, index, n, warm, live, fd, base_offset, offset, extra, nowait) -> tuple | None | False
 *
 * One lookup in one segment, in one call: the offset index's floor entry for `offset` (the index
 * buffer holds n valid entries, as `entry` takes them, with the `.log`'s current size as value
 * limit), then for BATCH, READ and TIME the walk of batch headers in the `.log` (descriptor fd)
 * from that entry's position. By kind:
 *   ENTRY (0): (base_offset, entry offset, position), the floor entry (OffsetIndex.lookup);
 *   CEILING (4): (base_offset, entry offset, position) of the least entry >= offset (ceiling_entry),
 *              None when there is none;
 *   BATCH (1): (base_offset, batch base offset, last offset, position, size) of the first batch whose
 *              last offset >= offset (LogSegment.translateOffset);
 *   READ (2):  (base_offset, position, bytes) of that batch: max(extra, its size) bytes from it, fewer
 *              at the end of the `.log` (LogSegment.read with minOneMessage);
 *   TIME (3):  (base_offset, position, bytes of the whole batch) of the first batch from the entry
 *              whose max timestamp >= extra (the batch searchForTimestamp opens).
 * None when anything is not plain (the index as `entry` declines it, a batch the walk leaves to the
 * reference walk, none found before the end of the `.log`, a read error, a batch over 64 MiB): the
 * caller's Python path then answers from the start and says what is wrong. False when `nowait` and a
 * read would wait for the disk. The walk reads the `.log` in chunks of its own; every read is bounded
 * by its buffer.
 */
static PyObject *locate_in(int kind, PyObject *index, long long n, long long warm, int live, int fd,
                           long long base, long long offset, long long extra, int nowait);

static PyObject *
native_locate(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    long long kind, n, warm, fd, base, offset, extra;
    int live, nowait;
    if (nargs != 10) {
        PyErr_SetString(PyExc_TypeError, "locate() takes 10 arguments");
        return NULL;
    }
    if (int_arg(args, 0, LOCATE_ENTRY, LOCATE_CEILING, &kind) || int_arg(args, 2, 0, PY_SSIZE_T_MAX, &n) ||
        int_arg(args, 3, 0, PY_SSIZE_T_MAX, &warm) || (live = PyObject_IsTrue(args[4])) < 0 ||
        int_arg(args, 5, 0, INT_MAX, &fd) || int_arg(args, 6, 0, LLONG_MAX, &base) ||
        int_arg(args, 7, 0, LLONG_MAX, &offset) || int_arg(args, 8, LLONG_MIN, LLONG_MAX, &extra) ||
        (nowait = PyObject_IsTrue(args[9])) < 0)
        return NULL;
    return locate_in((int)kind, args[1], n, warm, live, (int)fd, base, offset, extra, nowait);
}

/* locate's work once its arguments are checked: `index` is the offset index's buffer. */
static PyObject *
locate_in(int kind, PyObject *index, long long n, long long warm, int live, int fd, long long base,
          long long offset, long long extra, int nowait)
{
    off_t log_size = lseek(fd, 0, SEEK_END);
    if (log_size < 0)
        Py_RETURN_NONE;
    Py_buffer view;
    if (PyObject_GetBuffer(index, &view, PyBUF_SIMPLE) != 0)
        return NULL;
    Py_ssize_t slot;
    int64_t key, value;
    int ceiling = kind == LOCATE_CEILING;
    int usable = index_entry(view.buf, view.len, n, 8, 4, offset - base, warm, ceiling, log_size, live, &slot, &key,
                             &value);
    PyBuffer_Release(&view);
    if (!usable || (ceiling && slot < 0))
        Py_RETURN_NONE;
    int64_t pos = slot >= 0 ? value : 0;
    if (pos < 0)
        Py_RETURN_NONE;
    if (kind == LOCATE_ENTRY || ceiling)
        return Py_BuildValue("(LLL)", base, slot >= 0 ? base + key : base, (long long)pos);
    int by_timestamp = kind == LOCATE_TIME;
    int64_t target = by_timestamp ? extra : offset;
    unsigned char chunk_buf[NEXT_CHUNK];
    Py_ssize_t chunk = FIRST_CHUNK;
    for (;;) {
        if (pos >= log_size - HEADER_UP_TO_MAGIC)
            Py_RETURN_NONE;
        Py_ssize_t want = log_size - pos < chunk ? (Py_ssize_t)(log_size - pos) : chunk;
        Py_ssize_t got = read_at(fd, chunk_buf, want, pos, nowait);
        if (got == WOULD_BLOCK)
            Py_RETURN_FALSE;
        if (got < 0)
            Py_RETURN_NONE;
        Py_ssize_t stop;
        if (walk_headers(chunk_buf, got, (Py_ssize_t)(log_size - pos), target, by_timestamp, &stop)) {
            const unsigned char *b = chunk_buf + stop;
            int64_t size = read_be(b + 8, 4) + LOG_OVERHEAD;
            int64_t at = pos + stop;
            if (kind == LOCATE_BATCH) {
                int64_t last = b[16] < 2 ? read_be(b, 8) : read_be(b, 8) + read_be(b + 23, 4);
                return Py_BuildValue("(LLLLL)", base, (long long)read_be(b, 8), (long long)last, (long long)at,
                                     (long long)size);
            }
            int64_t bytes = kind == LOCATE_READ && extra > size ? extra : size;
            if (bytes > log_size - at)
                bytes = log_size - at;
            if (bytes > (64 << 20))
                Py_RETURN_NONE;
            if (stop + bytes <= got)  /* all of it is in the chunk already read */
                return Py_BuildValue("(LLy#)", base, (long long)at, (const char *)b, (Py_ssize_t)bytes);
            PyObject *data = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)bytes);
            if (data == NULL)
                return NULL;
            got = read_at(fd, (unsigned char *)PyBytes_AS_STRING(data), (Py_ssize_t)bytes, at, nowait);
            if (got != bytes) {
                Py_DECREF(data);
                if (got == WOULD_BLOCK)
                    Py_RETURN_FALSE;
                Py_RETURN_NONE;
            }
            return Py_BuildValue("(LLN)", base, (long long)at, data);
        }
        if (stop == 0)
            Py_RETURN_NONE;
        pos += stop;
        chunk = NEXT_CHUNK;
    }
}

/*
 * locate_time(kind, time_index, time_n, time_warm, index, n, warm, fd, base_offset, timestamp,
 *             starting_offset, nowait) -> tuple | None | False
 *
 * A timestamp lookup in one segment no longer written (not live), in one call: the time index's floor
 * entry for `timestamp` (its buffer holds time_n valid entries of 12 bytes, as `entry` takes them; none
 * is (-1, base_offset), as TimeIndex.lookup answers), then locate's work from that entry's offset. By kind:
 *   ENTRY (0): (base_offset, entry timestamp, entry offset, position of the offset index's floor entry for
 *              that offset), LocalLog.lookup_timestamp's floor;
 *   TIME (3):  locate's TIME answer from max(entry offset, starting_offset), the batch
 *              findOffsetByTimestamp opens first.
 * None and False as locate answers them (an entry with a negative relative offset is left to Python).
 */
static PyObject *
native_locate_time(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    long long kind, time_n, time_warm, n, warm, fd, base, timestamp, starting;
    int nowait;
    if (nargs != 12) {
        PyErr_SetString(PyExc_TypeError, "locate_time() takes 12 arguments");
        return NULL;
    }
    if (int_arg(args, 0, LOCATE_ENTRY, LOCATE_TIME, &kind) || int_arg(args, 2, 0, PY_SSIZE_T_MAX, &time_n) ||
        int_arg(args, 3, 0, PY_SSIZE_T_MAX, &time_warm) || int_arg(args, 5, 0, PY_SSIZE_T_MAX, &n) ||
        int_arg(args, 6, 0, PY_SSIZE_T_MAX, &warm) || int_arg(args, 7, 0, INT_MAX, &fd) ||
        int_arg(args, 8, 0, LLONG_MAX, &base) || int_arg(args, 9, 0, LLONG_MAX, &timestamp) ||
        int_arg(args, 10, 0, LLONG_MAX, &starting) || (nowait = PyObject_IsTrue(args[11])) < 0)
        return NULL;
    if (kind != LOCATE_ENTRY && kind != LOCATE_TIME) {
        PyErr_SetString(PyExc_ValueError, "locate_time answers kinds ENTRY and TIME");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[1], &view, PyBUF_SIMPLE) != 0)
        return NULL;
    Py_ssize_t slot;
    int64_t key, value;
    int usable = index_entry(view.buf, view.len, time_n, 12, 8, timestamp, time_warm, 0, INT64_MAX, 0, &slot, &key,
                             &value);
    PyBuffer_Release(&view);
    if (!usable || value < 0 || base > LLONG_MAX - value)
        Py_RETURN_NONE;
    long long entry_ts = slot >= 0 ? key : -1;
    long long entry_offset = base + value;  /* value is 0 when there is no entry */
    if (kind == LOCATE_TIME)
        return locate_in(LOCATE_TIME, args[4], n, warm, 0, (int)fd, base,
                         entry_offset > starting ? entry_offset : starting, timestamp, nowait);
    PyObject *found = locate_in(LOCATE_ENTRY, args[4], n, warm, 0, (int)fd, base, entry_offset, 0, nowait);
    if (found == NULL || !PyTuple_Check(found))
        return found;  /* an error, None or False */
    PyObject *answer = Py_BuildValue("(LLLO)", base, entry_ts, entry_offset, PyTuple_GET_ITEM(found, 2));
    Py_DECREF(found);
    return answer;
}

/*
 * open_sizes(handles) -> [int]: for each lookupd.log.fileio.LazyHandle, the size of its file (lseek to
 * the end) where its `_handle` is open, -1 where it is not. The handle is held (so its descriptor stays
 * open: only its finalizer closes it) from reading `fd` to the lseek. An lseek that fails answers -1 too.
 */
static PyObject *
native_open_sizes(PyObject *self, PyObject *arg)
{
    PyObject *seq = PySequence_Fast(arg, "open_sizes takes a list of handles");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject *out = PyList_New(n);
    for (Py_ssize_t i = 0; out != NULL && i < n; i++) {
        long long size = -1;
        PyObject *h = PyObject_GetAttrString(PySequence_Fast_GET_ITEM(seq, i), "_handle");
        if (h == NULL) {
            Py_CLEAR(out);
            break;
        }
        if (h != Py_None) {
            PyObject *fd = PyObject_GetAttrString(h, "fd");
            long v = fd == NULL ? -1 : PyLong_AsLong(fd);
            Py_XDECREF(fd);
            if (PyErr_Occurred()) {
                Py_DECREF(h);
                Py_CLEAR(out);
                break;
            }
            off_t end = lseek((int)v, 0, SEEK_END);
            size = end < 0 ? -1 : (long long)end;
        }
        Py_DECREF(h);
        PyObject *item = PyLong_FromLongLong(size);
        if (item == NULL)
            Py_CLEAR(out);
        else
            PyList_SET_ITEM(out, i, item);
    }
    Py_DECREF(seq);
    return out;
}

static PyMethodDef methods[] = {
    {"open_sizes", native_open_sizes, METH_O,
     "open_sizes(handles) -> [size or -1]: each open LazyHandle's file size, in one call (see _native.c)."},
    {"resident", native_resident, METH_VARARGS,
     "resident(address, length) -> whether every page of the range is in memory (mincore)."},
    {"slot", native_slot, METH_VARARGS,
     "slot(buffer, n, entry_size, field_offset, width, target, warm_entries, upper) -> Kafka's slot search."},
    {"entry", (PyCFunction)(void (*)(void))native_entry, METH_FASTCALL,
     "entry(buffer, n, entry_size, key_width, target, warm_entries, ceiling, value_limit, live) -> "
     "(slot, key, value) or None: an index's floor or ceiling entry in one call (see _native.c)."},
    {"plain_slot", native_plain_slot, METH_VARARGS,
     "plain_slot(buffer, n, entry_size, field_offset, width, target) -> floor slot, plain binary search."},
    {"locate", (PyCFunction)(void (*)(void))native_locate, METH_FASTCALL,
     "locate(kind, index, n, warm, live, fd, base_offset, offset, extra, nowait) -> tuple, None or False: "
     "one lookup in one segment (see _native.c)."},
    {"locate_time", (PyCFunction)(void (*)(void))native_locate_time, METH_FASTCALL,
     "locate_time(kind, time_index, time_n, time_warm, index, n, warm, fd, base_offset, timestamp, "
     "starting_offset, nowait) -> tuple, None or False: a timestamp lookup in one rolled segment (see _native.c)."},
    {"find_batch", native_find_batch, METH_VARARGS,
     "find_batch(buffer, end, target, by_timestamp) -> (offset, found): the batch-header walk (see _native.c)."},
    {"install", guard_install, METH_NOARGS, "Install the SIGBUS handler (idempotent)."},
    {"register", guard_register, METH_VARARGS, "register(address, length) -> slot: guard a read-only map."},
    {"unregister", guard_unregister, METH_O, "unregister(slot): stop guarding (call before unmapping)."},
    {"faults", guard_faults, METH_NOARGS, "Number of faults absorbed so far."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_native", "SIGBUS guard and index search for read-only index maps.", -1, methods,
};

PyMODINIT_FUNC
PyInit__native(void)
{
    return PyModule_Create(&module);
}
