/*
 * The parts of the lookupd.format._decode extension, one concern per source file:
 *
 *   _decode.c      the module: its method table, and the codec calls of _codecs.c for Python
 *   _records.c     v2 record sections into column buffers (the Out columns below)
 *   _crc32c.c      CRC32C (Castagnoli), three streams at once with SSE4.2
 *   _frames.c      walking the batch frames of a buffer: columnar decoding of many batches, and the
 *                  sound-batch check of `read`'s answer
 *   _json.c        JSON lines from the columns
 *   _timestamps.c  the timestamp scan of one batch
 *   _bitmaps.c     Arrow validity bitmaps, and a batch flag spread over its records
 *   _offsets.c     __consumer_offsets' committed offsets (CommitTable) and its plain commits applied to them
 *   _avro.c        Avro values in Confluent's wire format, a column at a time: JSON text, or a struct's columns
 *
 * Kafka's format constants and the big-endian and varint readers are in _kafka.h (shared with
 * lookupd/log/_native.c); the codecs are _codecs.c.
 */
#ifndef LOOKUPD_DECODE_H
#define LOOKUPD_DECODE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#include "_kafka.h"

/* ------------------------------------------------------------------ output columns (_records.c) */

/* Output columns, in the order decode_v2 takes them. */
enum {
    C_OFFSET, C_TIMESTAMP,
    C_KEY_VALID, C_KEY_END, C_KEY_DATA,
    C_VALUE_VALID, C_VALUE_END, C_VALUE_DATA,
    C_HDR_END,                      /* per record: end index into the header entries (int32) */
    C_HKEY_END, C_HKEY_DATA,        /* per header: key end offset (int32), key bytes */
    C_HVAL_VALID, C_HVAL_END, C_HVAL_DATA,
    N_COLUMNS
};

/*
 * Output columns. A call reserves room for all it may append (upper bounds from the input's size)
 * with one resize per column, writes through raw pointers, and shrinks the columns to what it
 * wrote before it returns: no allocation per batch or per record. A batch that is handed back
 * to Python is undone by resetting the write positions to where the batch began.
 */
typedef struct {
    PyObject *ba[N_COLUMNS];
    char *at[N_COLUMNS];            /* the column's bytes (valid between reserve and finish) */
    Py_ssize_t used[N_COLUMNS];     /* bytes written */
    Py_ssize_t cap[N_COLUMNS];      /* bytes reserved */
} Out;

/* The 14 bytearrays of a call's arguments as columns; -1 with TypeError when one is not a bytearray. */
int columns_take(PyObject *const *items, Out *o);

/* Start writing after the columns' bytes, with room for the records of `bytes` bytes of record data. */
int columns_reserve(Out *o, Py_ssize_t bytes, int with_headers);

/* Make room past what is written for the records of `bytes` more bytes of record data; a column
 * short of it gets room for `bytes + slack` (each resize may copy the column). */
int columns_grow(Out *o, Py_ssize_t bytes, Py_ssize_t slack, int with_headers);

/* Shrink the columns to what is written. */
void columns_finish(Out *o);

/* Append `count` records from data[0:n] to the reserved columns: 1 when done, 0 when the Python
 * decoder must take the batch (the columns are as they were). */
int decode_records(Out *o, const uint8_t *data, Py_ssize_t n, Py_ssize_t count, int64_t base_offset, int64_t base_ts,
                   int64_t fixed_ts, int has_fixed, int with_headers);

/* ------------------------------------------------------------------ batch facts (_frames.c, _bitmaps.c) */

/* decode_frames' six int64 per batch it takes. */
enum { F_POSITION, F_BASE_OFFSET, F_LAST_OFFSET, F_PRODUCER_ID, F_FLAGS, F_COUNT, N_FACTS };
#define FLAG_TRANSACTIONAL 1
#define FLAG_LOG_APPEND_TIME 2

/* ------------------------------------------------------------------ CRC32C (_crc32c.c) */

void crc32c_init(void);
uint32_t crc32c_of(const uint8_t *p, size_t n);

/* ------------------------------------------------------------------ UTF-8 (_json.c, _avro.c) */

/* Length of the valid UTF-8 sequence at s[0..n) (n >= 1, s[0] >= 0x80), 0 if it is not one. */
static inline int
utf8_sequence(const uint8_t *s, Py_ssize_t n, uint32_t *cp)
{
    uint8_t c = s[0];
    if (c >= 0xC2 && c <= 0xDF) {
        if (n < 2 || (s[1] & 0xC0) != 0x80)
            return 0;
        *cp = (uint32_t)(c & 0x1F) << 6 | (s[1] & 0x3F);
        return 2;
    }
    if (c >= 0xE0 && c <= 0xEF) {
        if (n < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80)
            return 0;
        if ((c == 0xE0 && s[1] < 0xA0) || (c == 0xED && s[1] > 0x9F))
            return 0;                   /* overlong, or a surrogate */
        *cp = (uint32_t)(c & 0x0F) << 12 | (uint32_t)(s[1] & 0x3F) << 6 | (s[2] & 0x3F);
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (n < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80)
            return 0;
        if ((c == 0xF0 && s[1] < 0x90) || (c == 0xF4 && s[1] > 0x8F))
            return 0;                   /* overlong, or above U+10FFFF */
        *cp = (uint32_t)(c & 0x07) << 18 | (uint32_t)(s[1] & 0x3F) << 12 | (uint32_t)(s[2] & 0x3F) << 6 | (s[3] & 0x3F);
        return 4;
    }
    return 0;
}

/* Whether s[0..n) is valid UTF-8 (Python's strict decoder). */
static inline int
is_utf8(const uint8_t *s, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    uint32_t cp;
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        int k = utf8_sequence(s + i, n - i, &cp);
        if (k == 0)
            return 0;
        i += k;
    }
    return 1;
}

/* ------------------------------------------------------------------ the module's functions */

PyObject *decode_v2(PyObject *self, PyObject *args);               /* _records.c */
PyObject *py_crc32c(PyObject *self, PyObject *arg);                /* _crc32c.c */
PyObject *decode_frames(PyObject *self, PyObject *args);           /* _frames.c */
PyObject *sound_batches(PyObject *self, PyObject *arg);            /* _frames.c */
PyObject *render_batch(PyObject *self, PyObject *args);            /* _json.c */
PyObject *find_timestamp(PyObject *self, PyObject *args);          /* _timestamps.c */
PyObject *find_timestamp_batch(PyObject *self, PyObject *args);    /* _timestamps.c */
PyObject *validity_bitmap(PyObject *self, PyObject *arg);          /* _bitmaps.c */
PyObject *nonempty_bitmap(PyObject *self, PyObject *arg);          /* _bitmaps.c */
PyObject *spread_flag(PyObject *self, PyObject *args);             /* _bitmaps.c */
PyObject *commit_runs(PyObject *self, PyObject *args);             /* _offsets.c */
extern PyTypeObject CommitTableType;                               /* _offsets.c */
PyObject *avro_program(PyObject *self, PyObject *arg);             /* _avro.c */
PyObject *avro_json(PyObject *self, PyObject *args);               /* _avro.c */
PyObject *avro_arrow(PyObject *self, PyObject *args);              /* _avro.c */
void offsets_seed(uint64_t seed);                                  /* _offsets.c */

#endif
