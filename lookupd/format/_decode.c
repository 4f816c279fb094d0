/*
 * Columnar decoding of Kafka v2 record batches (DefaultRecord), for lookupd.format.columnar.
 *
 * One call decodes the record section of one batch (after its 61-byte header, decompressed)
 * into column buffers that grow across batches: offsets and timestamps (int64), keys and
 * values in Arrow's binary layout (a validity byte per record, int32 end offsets, one data
 * buffer), and headers as Arrow list<struct<key: string, value: binary>> buffers. No Python
 * object is made per record.
 *
 * Every read is bounded by the record section's length. The decoder does not explain
 * faults: on anything the Python decoder (lookupd.format.records) would reject, and on the
 * rare inputs it treats specially (header keys that are not valid UTF-8, offsets or
 * timestamps beyond int64), it leaves the columns as they were and returns False; the
 * caller then runs the Python decoder on the batch, which raises the exact error (naming
 * file and byte position) or handles the special case. So both paths give the same records
 * and the same errors by construction.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "_codecs.h"

#include <stdint.h>
#include <string.h>

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

/* Zig-zag varint (at most 5 bytes, 32 bits kept) / varlong (10 bytes, 64 bits), as Kafka's ByteUtils. */
static inline int
read_varint(const uint8_t **pp, const uint8_t *end, int64_t *out)
{
    const uint8_t *p = *pp;
    uint32_t raw = 0;
    for (int shift = 0; shift < 35; shift += 7) {
        if (p >= end)
            return -1;
        uint8_t b = *p++;
        raw |= (uint32_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            *out = (int32_t)((raw >> 1) ^ (uint32_t)(-(int32_t)(raw & 1)));
            *pp = p;
            return 0;
        }
    }
    return -1;
}

static inline int
read_varlong(const uint8_t **pp, const uint8_t *end, int64_t *out)
{
    const uint8_t *p = *pp;
    uint64_t raw = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (p >= end)
            return -1;
        uint8_t b = *p++;
        raw |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            *out = (int64_t)((raw >> 1) ^ (uint64_t)(-(int64_t)(raw & 1)));
            *pp = p;
            return 0;
        }
    }
    return -1;
}

/* The smallest DefaultRecord takes 7 bytes (length, attributes, timestamp delta, offset delta, key
 * length, value length, header count); a header at least 2 (key length, value length). */
#define MIN_RECORD 7
#define MIN_HEADER 2

/* Column room for the records of `bytes` bytes of record data: upper bounds from the smallest record. */
static void
room(Py_ssize_t bytes, int with_headers, Py_ssize_t add[N_COLUMNS])
{
    Py_ssize_t records = bytes / MIN_RECORD + 1, headers = with_headers ? bytes / MIN_HEADER + 1 : 0;
    Py_ssize_t a[N_COLUMNS] = {
        [C_OFFSET] = records * 8, [C_TIMESTAMP] = records * 8,
        [C_KEY_VALID] = records, [C_KEY_END] = records * 4, [C_KEY_DATA] = bytes,
        [C_VALUE_VALID] = records, [C_VALUE_END] = records * 4, [C_VALUE_DATA] = bytes,
        [C_HDR_END] = with_headers ? records * 4 : 0,
        [C_HKEY_END] = headers * 4, [C_HKEY_DATA] = with_headers ? bytes : 0,
        [C_HVAL_VALID] = headers, [C_HVAL_END] = headers * 4, [C_HVAL_DATA] = with_headers ? bytes : 0,
    };
    memcpy(add, a, sizeof a);
}

/* Make room past what is written for the records of `bytes` more bytes of record data; a column
 * short of it gets room for `bytes + slack` (each resize may copy the column). */
static int
grow(Out *o, Py_ssize_t bytes, Py_ssize_t slack, int with_headers)
{
    Py_ssize_t add[N_COLUMNS], more[N_COLUMNS];
    room(bytes, with_headers, add);
    room(bytes + slack, with_headers, more);
    for (int i = 0; i < N_COLUMNS; i++) {
        if (o->used[i] + add[i] <= o->cap[i])
            continue;
        Py_ssize_t cap = o->used[i] + more[i];
        /* Down to what is written first (in place), so that a move copies only that, not
         * the room reserved past it, which is mostly unwritten. */
        if (o->cap[i] > o->used[i] && PyByteArray_Resize(o->ba[i], o->used[i]) < 0)
            PyErr_Clear();          /* not shrunk: the resize below copies more, that is all */
        if (PyByteArray_Resize(o->ba[i], cap) < 0)
            return -1;
        o->cap[i] = cap;
        o->at[i] = PyByteArray_AS_STRING(o->ba[i]);
    }
    return 0;
}

static void finish(Out *o);

/* Start writing after the columns' bytes, with room for the records of `bytes` bytes of record data. */
static int
reserve(Out *o, Py_ssize_t bytes, int with_headers)
{
    for (int i = 0; i < N_COLUMNS; i++) {
        o->used[i] = o->cap[i] = PyByteArray_GET_SIZE(o->ba[i]);
        o->at[i] = PyByteArray_AS_STRING(o->ba[i]);
    }
    if (grow(o, bytes, 0, with_headers) < 0) {
        finish(o);
        return -1;
    }
    return 0;
}

static void
finish(Out *o)
{
    for (int i = 0; i < N_COLUMNS; i++)
        PyByteArray_Resize(o->ba[i], o->used[i]);  /* shrinking never fails */
}

static inline void
put(Out *o, int col, const void *src, size_t n)
{
    memcpy(o->at[col] + o->used[col], src, n);
    o->used[col] += (Py_ssize_t)n;
}

static inline void
put_i32(Out *o, int col, int32_t v) { put(o, col, &v, 4); }

static inline void
put_i64(Out *o, int col, int64_t v) { put(o, col, &v, 8); }

static inline void
put_u8(Out *o, int col, uint8_t v) { o->at[col][o->used[col]++] = (char)v; }

/* End offset of an Arrow binary column: the data column's size, relative to its start (the data
 * column of a builder starts empty, and the end column with a leading 0). */
static inline int32_t
data_end(Out *o, int col) { return (int32_t)o->used[col]; }

static int
valid_utf8(const uint8_t *s, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    while (i < n && s[i] < 0x80)    /* header keys are nearly always ASCII */
        i++;
    if (i == n)
        return 1;
    PyObject *u = PyUnicode_DecodeUTF8((const char *)s, n, "strict");
    if (u == NULL) {
        PyErr_Clear();
        return 0;
    }
    Py_DECREF(u);
    return 1;
}

/* Append `count` records from data[0:n] to the reserved columns: 1 when done, 0 when the Python
 * decoder must take the batch (the columns are as they were). */
static int
decode_records(Out *o, const uint8_t *data, Py_ssize_t n, Py_ssize_t count, int64_t base_offset, int64_t base_ts,
               int64_t fixed_ts, int has_fixed, int with_headers)
{
    Py_ssize_t mark[N_COLUMNS];
    memcpy(mark, o->used, sizeof mark);
    const uint8_t *end = data + n, *p = data;
    if (count < 0 || count > n)     /* every record takes at least one byte */
        goto undo;
    if (o->used[C_KEY_DATA] + n > INT32_MAX || o->used[C_VALUE_DATA] + n > INT32_MAX ||
        o->used[C_HKEY_DATA] + n > INT32_MAX || o->used[C_HVAL_DATA] + n > INT32_MAX)
        goto undo;                  /* Arrow's int32 offsets would overflow: the caller flushes first */
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t size, ts, od, kl, vl, hc, offset, timestamp;
        if (read_varint(&p, end, &size) < 0 || size < 0 || size > end - p)
            goto undo;
        const uint8_t *rec_end = p + size;
        if (end - p < 2)            /* attributes byte, then the timestamp delta */
            goto undo;
        p += 1;
        if (read_varlong(&p, end, &ts) < 0 || read_varint(&p, end, &od) < 0 || read_varint(&p, end, &kl) < 0)
            goto undo;
        if (kl >= 0) {
            if (kl > end - p)
                goto undo;
            put(o, C_KEY_DATA, p, (size_t)kl);
            p += kl;
        }
        put_u8(o, C_KEY_VALID, kl >= 0);
        put_i32(o, C_KEY_END, data_end(o, C_KEY_DATA));
        if (read_varint(&p, end, &vl) < 0)
            goto undo;
        if (vl >= 0) {
            if (vl > end - p)
                goto undo;
            put(o, C_VALUE_DATA, p, (size_t)vl);
            p += vl;
        }
        put_u8(o, C_VALUE_VALID, vl >= 0);
        put_i32(o, C_VALUE_END, data_end(o, C_VALUE_DATA));
        if (read_varint(&p, end, &hc) < 0 || hc < 0 || hc > end - p)
            goto undo;
        for (int64_t h = 0; h < hc; h++) {
            int64_t hkl, hvl;
            if (read_varint(&p, end, &hkl) < 0 || hkl < 0 || hkl > end - p)
                goto undo;
            const uint8_t *hk = p;
            p += hkl;
            if (read_varint(&p, end, &hvl) < 0 || (hvl >= 0 && hvl > end - p))
                goto undo;
            if (with_headers) {
                if (!valid_utf8(hk, hkl))
                    goto undo;      /* malformed UTF-8 is replaced by Kafka: the Python decoder does that */
                put(o, C_HKEY_DATA, hk, (size_t)hkl);
                put_i32(o, C_HKEY_END, data_end(o, C_HKEY_DATA));
                if (hvl >= 0)
                    put(o, C_HVAL_DATA, p, (size_t)hvl);
                put_u8(o, C_HVAL_VALID, hvl >= 0);
                put_i32(o, C_HVAL_END, data_end(o, C_HVAL_DATA));
            }
            if (hvl >= 0)
                p += hvl;
        }
        if (with_headers)
            put_i32(o, C_HDR_END, (int32_t)(o->used[C_HKEY_END] / 4 - 1));
        if (p != rec_end || __builtin_add_overflow(base_offset, od, &offset))
            goto undo;
        if (has_fixed)
            timestamp = fixed_ts;
        else if (__builtin_add_overflow(base_ts, ts, &timestamp))
            goto undo;
        put_i64(o, C_OFFSET, offset);
        put_i64(o, C_TIMESTAMP, timestamp);
    }
    if (p != end)
        goto undo;
    return 1;
undo:
    memcpy(o->used, mark, sizeof mark);
    return 0;
}

static int
parse_columns(PyObject *const *items, Out *o)
{
    for (int i = 0; i < N_COLUMNS; i++) {
        if (!PyByteArray_Check(items[i])) {
            PyErr_SetString(PyExc_TypeError, "columns must be bytearrays");
            return -1;
        }
        o->ba[i] = items[i];
    }
    return 0;
}

/*
 * decode_v2(records, count, base_offset, base_timestamp, fixed_timestamp, has_fixed, headers, *14 bytearrays)
 *   -> True when one batch's records were appended to the columns, False when the Python decoder must take it.
 */
static PyObject *
decode_v2(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t count;
    long long base_offset, base_ts, fixed_ts;
    int has_fixed, with_headers;
    PyObject *cols[N_COLUMNS];
    Out o;
    if (!PyArg_ParseTuple(args, "y*nLLLpp" "OOOOOOOOOOOOOO", &view, &count, &base_offset, &base_ts, &fixed_ts,
                          &has_fixed, &with_headers, &cols[0], &cols[1], &cols[2], &cols[3], &cols[4], &cols[5],
                          &cols[6], &cols[7], &cols[8], &cols[9], &cols[10], &cols[11], &cols[12], &cols[13]))
        return NULL;
    int r = -1;
    if (parse_columns(cols, &o) == 0 && reserve(&o, view.len, with_headers) == 0) {
        r = decode_records(&o, (const uint8_t *)view.buf, view.len, count, base_offset, base_ts, fixed_ts, has_fixed,
                           with_headers);
        finish(&o);
    }
    PyBuffer_Release(&view);
    if (r < 0)
        return NULL;
    return PyBool_FromLong(r);
}

/* ------------------------------------------------------------------ CRC32C (Castagnoli) */

static uint32_t crc_table[256];

static void
crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0x82F63B78u & (uint32_t)-(int32_t)(c & 1));
        crc_table[i] = c;
    }
}

static uint32_t
crc32c_sw(const uint8_t *p, size_t n)
{
    uint32_t crc = 0xFFFFFFFFu;
    while (n--)
        crc = (crc >> 8) ^ crc_table[(crc ^ *p++) & 0xFF];
    return ~crc;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
/*
 * The crc32 instruction takes 3 cycles and can start one every cycle, so three independent runs
 * go three times as fast as one: a batch is taken CRC_STRIDE * 3 bytes at a time, as three
 * streams, the second and third started from a zero register. Their results are joined by
 * linearity: the register after data A then B, from x, is shift(R(x, A)) ^ R(0, B), where
 * shift(v) is the register after CRC_STRIDE zero bytes from v, a linear map of v, applied
 * through four tables of 256 entries (crc_shift_init).
 */
#define CRC_STRIDE 512
static uint32_t crc_shift[4][256];

static inline uint64_t
load64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

__attribute__((target("sse4.2"))) static void
crc_shift_init(void)
{
    uint32_t basis[32];             /* shift(1 << i) */
    for (int i = 0; i < 32; i++) {
        uint64_t c = (uint64_t)1 << i;
        for (int k = 0; k < CRC_STRIDE; k += 8)
            c = _mm_crc32_u64(c, 0);
        basis[i] = (uint32_t)c;
    }
    for (int t = 0; t < 4; t++)
        for (uint32_t b = 0; b < 256; b++) {
            uint32_t v = b << (8 * t), out = 0;
            for (int i = 0; i < 32; i++)
                if (v >> i & 1)
                    out ^= basis[i];
            crc_shift[t][b] = out;
        }
}

static inline uint32_t
crc_shifted(uint32_t v)
{
    return crc_shift[0][v & 0xFF] ^ crc_shift[1][v >> 8 & 0xFF] ^ crc_shift[2][v >> 16 & 0xFF] ^ crc_shift[3][v >> 24];
}

__attribute__((target("sse4.2"))) static uint32_t
crc32c_hw(const uint8_t *p, size_t n)
{
    uint64_t crc = 0xFFFFFFFFu;
    while (n >= 3 * CRC_STRIDE) {
        uint64_t b = 0, c = 0;
        for (size_t i = 0; i < CRC_STRIDE; i += 8) {
            crc = _mm_crc32_u64(crc, load64(p + i));
            b = _mm_crc32_u64(b, load64(p + CRC_STRIDE + i));
            c = _mm_crc32_u64(c, load64(p + 2 * CRC_STRIDE + i));
        }
        crc = crc_shifted(crc_shifted((uint32_t)crc) ^ (uint32_t)b) ^ (uint32_t)c;
        p += 3 * CRC_STRIDE;
        n -= 3 * CRC_STRIDE;
    }
    while (n >= 8) {
        crc = _mm_crc32_u64(crc, load64(p));
        p += 8;
        n -= 8;
    }
    uint32_t c = (uint32_t)crc;
    while (n--)
        c = _mm_crc32_u8(c, *p++);
    return ~c;
}
static int have_hw;
#define CRC32C(p, n) (have_hw ? crc32c_hw((p), (n)) : crc32c_sw((p), (n)))
#else
#define CRC32C(p, n) crc32c_sw((p), (n))
#endif

static PyObject *
py_crc32c(PyObject *self, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    uint32_t crc = CRC32C((const uint8_t *)view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(crc);
}

/* ------------------------------------------------------------------ many batches at once */

static inline uint32_t be32(const uint8_t *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }
static inline uint16_t be16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static inline uint64_t be64(const uint8_t *p) { return (uint64_t)be32(p) << 32 | be32(p + 4); }

/* compression.MAX_DECOMPRESSED_SIZE: Kafka counts a batch's uncompressed bytes in an int. */
#define MAX_DECOMPRESSED ((size_t)INT32_MAX)
#define V2_HEADER 61
#define LOG_OVERHEAD 12
#define HEADER_UP_TO_MAGIC 17       /* batch.HEADER_SIZE_UP_TO_MAGIC: fewer bytes left end a walk */
#define RECORD_OVERHEAD_V0 14       /* batch.RECORD_OVERHEAD_V0: the smallest legal size field */
#define CRC_START 21
enum { F_POSITION, F_BASE_OFFSET, F_LAST_OFFSET, F_PRODUCER_ID, F_FLAGS, F_COUNT, N_FACTS };
#define FLAG_TRANSACTIONAL 1
#define FLAG_LOG_APPEND_TIME 2

/*
 * decode_frames(buffer, start, end, file_position, headers, facts, *14 bytearrays) -> stop
 *
 * Walks the record batches in buffer[start:end] (buffer[0] is at `file_position` in the file):
 * for each whole v2 batch whose CRC32C matches and whose records decode (after decompression
 * by _codecs.c), appends its records to the columns and (position, base offset, last offset,
 * producer id, flags, record count) as six int64 to `facts`; control batches are checked and
 * passed over. Stops at the first batch it does not take (not whole in the buffer, legacy, a
 * wrong CRC, a codec or form _codecs.c leaves to Python, records it cannot decode) and returns
 * where that batch starts (`end` when all were taken): the caller handles that one batch in
 * Python and calls again after it.
 */
static PyObject *
decode_frames(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t start, stop;
    long long file_position;
    int with_headers;
    PyObject *facts, *cols[N_COLUMNS];
    Out o;
    if (!PyArg_ParseTuple(args, "y*nnLpO" "OOOOOOOOOOOOOO", &view, &start, &stop, &file_position, &with_headers,
                          &facts, &cols[0], &cols[1], &cols[2], &cols[3], &cols[4], &cols[5], &cols[6], &cols[7],
                          &cols[8], &cols[9], &cols[10], &cols[11], &cols[12], &cols[13]))
        return NULL;
    if (parse_columns(cols, &o) < 0 || !PyByteArray_Check(facts)) {
        PyBuffer_Release(&view);
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "facts must be a bytearray");
        return NULL;
    }
    if (start < 0 || stop > view.len || start > stop) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "start and end must lie within the buffer");
        return NULL;
    }
    const uint8_t *buf = (const uint8_t *)view.buf;
    Py_ssize_t pos = start;
    int err = 0;
    /* facts: at most one entry per 61 bytes */
    Py_ssize_t facts0 = PyByteArray_GET_SIZE(facts), nfacts = 0;
    if (reserve(&o, stop - start, with_headers) < 0 ||
        PyByteArray_Resize(facts, facts0 + ((stop - start) / V2_HEADER + 1) * N_FACTS * 8) < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    char *facts_at = PyByteArray_AS_STRING(facts) + facts0;
    while (stop - pos >= V2_HEADER) {
        const uint8_t *b = buf + pos;
        int64_t length = (int32_t)be32(b + 8);
        Py_ssize_t size = (Py_ssize_t)length + LOG_OVERHEAD;
        if (length < V2_HEADER - LOG_OVERHEAD || size > stop - pos || b[16] != 2)
            break;
        uint16_t attrs = be16(b + 21);
        if (CRC32C(b + CRC_START, (size_t)(size - CRC_START)) != be32(b + 17))
            break;                  /* the caller raises the exact error */
        int64_t base_offset = (int64_t)be64(b);
        int64_t count = (int32_t)be32(b + 57);
        if (count < 0)
            break;
        int64_t last_offset;
        if (__builtin_add_overflow(base_offset, (int64_t)(int32_t)be32(b + 23), &last_offset))
            break;                  /* beyond int64: the caller reports it */
        if (!(attrs & 0x20) && count > 0) {   /* a control batch holds no data records */
            int64_t base_ts = (int64_t)be64(b + 27), max_ts = (int64_t)be64(b + 35);
            int fixed = (attrs & 0x08) != 0;
            const uint8_t *records = b + V2_HEADER;
            Py_ssize_t records_len = size - V2_HEADER;
            if (attrs & 0x07) {     /* compressed: decompressed here when _codecs.c takes it, else by the caller */
                uint8_t *out;
                records_len = codecs_decompress(attrs & 0x07, records, (size_t)records_len, MAX_DECOMPRESSED, &out);
                if (records_len < 0)
                    break;
                /* room for these records and, as reserved at the start, for all after this batch; a
                 * column short of that gets half as much again, as the batches after it may grow
                 * the columns too, and every resize may copy them */
                Py_ssize_t need = records_len + (stop - pos - size);
                if (grow(&o, need, need / 2, with_headers) < 0) {
                    err = 1;
                    break;
                }
                records = out;
            }
            if (!decode_records(&o, records, records_len, (Py_ssize_t)count, base_offset, base_ts, max_ts, fixed,
                                with_headers))
                break;
            int64_t f[N_FACTS] = {file_position + pos, base_offset, last_offset,
                                  (int64_t)be64(b + 43), ((attrs & 0x10) ? FLAG_TRANSACTIONAL : 0) |
                                  (fixed ? FLAG_LOG_APPEND_TIME : 0), count};
            memcpy(facts_at + nfacts * sizeof f, f, sizeof f);
            nfacts++;
        }
        pos += size;
    }
    finish(&o);
    PyByteArray_Resize(facts, facts0 + nfacts * N_FACTS * 8);
    PyBuffer_Release(&view);
    if (err)
        return NULL;
    return PyLong_FromSsize_t(pos);  /* fewer bytes than a header left: the caller judges (cut batch or not) */
}

/* ------------------------------------------------------------------ JSON lines from columns */

/*
 * The JSON of `lookupd.format.render.record_json` as Python's json module writes it with
 * separators (",", ":") and ensure_ascii: strings escape '"', '\\', \b \f \n \r \t by name and
 * every other character outside ' '..'~' as \uXXXX (lowercase hex, surrogate pairs above
 * U+FFFF). A key, value or header value is such a string when it is valid UTF-8 (Python's
 * strict decoder: no overlong forms, no surrogates, nothing above U+10FFFF), else
 * {"base64":"..."} in the standard alphabet with padding, and null when absent.
 */

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

static int
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

static const char HEX[] = "0123456789abcdef";

static inline char *
put_u16_escape(char *o, uint32_t u)
{
    o[0] = '\\'; o[1] = 'u';
    o[2] = HEX[(u >> 12) & 15]; o[3] = HEX[(u >> 8) & 15]; o[4] = HEX[(u >> 4) & 15]; o[5] = HEX[u & 15];
    return o + 6;
}

/* A JSON string of valid UTF-8 bytes: at most 6 output bytes per input byte. */
static char *
put_json_string(char *o, const uint8_t *s, Py_ssize_t n)
{
    *o++ = '"';
    Py_ssize_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c >= ' ' && c <= '~' && c != '"' && c != '\\') {
            *o++ = (char)c;
            i++;
            continue;
        }
        if (c < 0x80) {
            i++;
            switch (c) {
            case '"': *o++ = '\\'; *o++ = '"'; break;
            case '\\': *o++ = '\\'; *o++ = '\\'; break;
            case '\b': *o++ = '\\'; *o++ = 'b'; break;
            case '\f': *o++ = '\\'; *o++ = 'f'; break;
            case '\n': *o++ = '\\'; *o++ = 'n'; break;
            case '\r': *o++ = '\\'; *o++ = 'r'; break;
            case '\t': *o++ = '\\'; *o++ = 't'; break;
            default: o = put_u16_escape(o, c);
            }
            continue;
        }
        uint32_t cp = 0;
        i += utf8_sequence(s + i, n - i, &cp);  /* validated by the caller */
        if (cp >= 0x10000) {
            cp -= 0x10000;
            o = put_u16_escape(o, 0xD800 | (cp >> 10));
            o = put_u16_escape(o, 0xDC00 | (cp & 0x3FF));
        } else {
            o = put_u16_escape(o, cp);
        }
    }
    *o++ = '"';
    return o;
}

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static char *
put_base64(char *o, const uint8_t *s, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8 | s[i + 2];
        *o++ = B64[v >> 18]; *o++ = B64[(v >> 12) & 63]; *o++ = B64[(v >> 6) & 63]; *o++ = B64[v & 63];
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)s[i] << 16;
        *o++ = B64[v >> 18]; *o++ = B64[(v >> 12) & 63]; *o++ = '='; *o++ = '=';
    } else if (n - i == 2) {
        uint32_t v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8;
        *o++ = B64[v >> 18]; *o++ = B64[(v >> 12) & 63]; *o++ = B64[(v >> 6) & 63]; *o++ = '=';
    }
    return o;
}

static inline char *
put_raw(char *o, const char *s, Py_ssize_t n)
{
    memcpy(o, s, (size_t)n);
    return o + n;
}

#define PUT_LITERAL(o, lit) put_raw((o), (lit), (Py_ssize_t)sizeof(lit) - 1)

/* A key, value or header value: null, a string, or {"base64":"..."}. */
static char *
put_payload(char *o, int valid, const uint8_t *s, Py_ssize_t n)
{
    if (!valid)
        return PUT_LITERAL(o, "null");
    if (is_utf8(s, n))
        return put_json_string(o, s, n);
    o = PUT_LITERAL(o, "{\"base64\":\"");
    o = put_base64(o, s, n);
    return PUT_LITERAL(o, "\"}");
}

static inline char *
put_int(char *o, int64_t v)
{
    char tmp[24];
    int k = 0;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        tmp[k++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        *o++ = '-';
    while (k)
        *o++ = tmp[--k];
    return o;
}

/* One record's item of an Arrow binary column (int32 ends, data), checked against the data's length. */
static inline int
item(const Out *o, int ends_col, int data_col, Py_ssize_t i, const uint8_t **s, Py_ssize_t *n)
{
    const int32_t *ends = (const int32_t *)o->at[ends_col];
    int32_t a = ends[i], z = ends[i + 1];
    if (a < 0 || z < a || z > o->used[data_col])
        return -1;
    *s = (const uint8_t *)o->at[data_col] + a;
    *n = z - a;
    return 0;
}

/* Bytes render_rows may write at most: 6 per data byte (escapes), fixed text per record and per header. */
static Py_ssize_t
render_bound(const Out *o, Py_ssize_t n, Py_ssize_t fixed)
{
    Py_ssize_t headers = o->used[C_HKEY_END] / 4;
    return n * (fixed + 160) + headers * 48 +
           6 * (o->used[C_KEY_DATA] + o->used[C_VALUE_DATA] + o->used[C_HKEY_DATA] + o->used[C_HVAL_DATA]);
}

/*
 * One JSON line per record of the columns (key == `key` only, when key is not NULL):
 *   head "offset":O,"timestamp":T mid KEY,"value":VALUE,"headers":[{"key":K,"value":V},...] tail
 * written at `o`; each line's offset and start (relative to `base`) go to offsets/starts, then the
 * end of the last line. Returns the end of the output and the number of lines, or NULL when the
 * columns are inconsistent (a header key that is not text).
 */
static char *
render_rows(const Out *c, Py_ssize_t n, const Py_buffer *head, const Py_buffer *mid, const Py_buffer *tail,
            const Py_buffer *key, char *base, char *o, int64_t *offsets, int64_t *starts, Py_ssize_t *lines)
{
    const int64_t *offset = (const int64_t *)c->at[C_OFFSET], *stamp = (const int64_t *)c->at[C_TIMESTAMP];
    const uint8_t *key_valid = (const uint8_t *)c->at[C_KEY_VALID], *value_valid = (const uint8_t *)c->at[C_VALUE_VALID];
    const uint8_t *hval_valid = (const uint8_t *)c->at[C_HVAL_VALID];
    const int32_t *hdr_end = (const int32_t *)c->at[C_HDR_END];
    Py_ssize_t k = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const uint8_t *s;
        Py_ssize_t len;
        if (item(c, C_KEY_END, C_KEY_DATA, i, &s, &len) < 0)
            return NULL;
        if (key != NULL && !(key_valid[i] && len == key->len && memcmp(s, key->buf, (size_t)len) == 0))
            continue;
        offsets[k] = offset[i];
        starts[k++] = o - base;
        o = put_raw(o, head->buf, head->len);
        o = PUT_LITERAL(o, "\"offset\":");
        o = put_int(o, offset[i]);
        o = PUT_LITERAL(o, ",\"timestamp\":");
        o = put_int(o, stamp[i]);
        o = put_raw(o, mid->buf, mid->len);
        o = put_payload(o, key_valid[i], s, len);
        o = PUT_LITERAL(o, ",\"value\":");
        if (item(c, C_VALUE_END, C_VALUE_DATA, i, &s, &len) < 0)
            return NULL;
        o = put_payload(o, value_valid[i], s, len);
        o = PUT_LITERAL(o, ",\"headers\":[");
        for (int32_t h = hdr_end[i]; h < hdr_end[i + 1]; h++) {
            if (h > hdr_end[i])
                *o++ = ',';
            o = PUT_LITERAL(o, "{\"key\":");
            if (item(c, C_HKEY_END, C_HKEY_DATA, h, &s, &len) < 0 || !is_utf8(s, len))
                return NULL;
            o = put_json_string(o, s, len);
            o = PUT_LITERAL(o, ",\"value\":");
            if (item(c, C_HVAL_END, C_HVAL_DATA, h, &s, &len) < 0)
                return NULL;
            o = put_payload(o, hval_valid[h], s, len);
            *o++ = '}';
        }
        *o++ = ']';
        o = put_raw(o, tail->buf, tail->len);
    }
    starts[k] = o - base;
    *lines = k;
    return o;
}

/*
 * render_batch(records, count, base_offset, base_timestamp, fixed_timestamp, has_fixed, head, mid, tail, key)
 *   -> (lines, offsets, starts) or None
 *
 * Decodes one v2 batch's record section (as decode_v2) into columns of its own and renders each
 * record (each whose key is `key`, unless key is None) as a JSON line with render_rows: `lines`
 * is the bytes, `offsets` the records' offsets and `starts` each line's start and then the end
 * (int64 each). None when the decoder hands the batch back: the caller renders it the reference way.
 */
static PyObject *
render_batch(PyObject *self, PyObject *args)
{
    Py_buffer records, head, mid, tail, key = {0};
    Py_ssize_t count;
    long long base_offset, base_ts, fixed_ts;
    int has_fixed;
    PyObject *key_obj;
    if (!PyArg_ParseTuple(args, "y*nLLLpy*y*y*O", &records, &count, &base_offset, &base_ts, &fixed_ts, &has_fixed,
                          &head, &mid, &tail, &key_obj))
        return NULL;
    PyObject *result = NULL, *lines = NULL, *offsets = NULL, *starts = NULL;
    Out o = {{0}};
    int have_key = key_obj != Py_None;
    if (have_key && PyObject_GetBuffer(key_obj, &key, PyBUF_SIMPLE) < 0)
        goto done;
    for (int i = 0; i < N_COLUMNS; i++)
        if ((o.ba[i] = PyByteArray_FromStringAndSize("\0\0\0\0", i == C_KEY_END || i == C_VALUE_END ||
                                                     i == C_HDR_END || i == C_HKEY_END || i == C_HVAL_END ? 4 : 0))
            == NULL)
            goto done;
    if (reserve(&o, records.len, 1) < 0)
        goto done;
    int decoded = decode_records(&o, (const uint8_t *)records.buf, records.len, count, base_offset, base_ts, fixed_ts,
                                 has_fixed, 1);
    finish(&o);
    for (int i = 0; i < N_COLUMNS; i++)
        o.at[i] = PyByteArray_AS_STRING(o.ba[i]);
    if (!decoded) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    Py_ssize_t n = o.used[C_OFFSET] / 8, k = 0;
    lines = PyBytes_FromStringAndSize(NULL, render_bound(&o, n, head.len + mid.len + tail.len));
    offsets = PyBytes_FromStringAndSize(NULL, n * 8);
    starts = PyBytes_FromStringAndSize(NULL, (n + 1) * 8);
    if (lines == NULL || offsets == NULL || starts == NULL)
        goto done;
    char *base = PyBytes_AS_STRING(lines);
    char *end = render_rows(&o, n, &head, &mid, &tail, have_key ? &key : NULL, base, base,
                            (int64_t *)PyBytes_AS_STRING(offsets), (int64_t *)PyBytes_AS_STRING(starts), &k);
    if (end == NULL) {
        result = Py_NewRef(Py_None);    /* not reached for what decode_records accepts; handed back all the same */
        goto done;
    }
    if (_PyBytes_Resize(&lines, end - base) < 0 || _PyBytes_Resize(&offsets, k * 8) < 0 ||
        _PyBytes_Resize(&starts, (k + 1) * 8) < 0)
        goto done;
    result = PyTuple_Pack(3, lines, offsets, starts);
done:
    Py_XDECREF(lines);
    Py_XDECREF(offsets);
    Py_XDECREF(starts);
    for (int i = 0; i < N_COLUMNS; i++)
        Py_XDECREF(o.ba[i]);
    if (have_key && key.obj != NULL)
        PyBuffer_Release(&key);
    PyBuffer_Release(&records);
    PyBuffer_Release(&head);
    PyBuffer_Release(&mid);
    PyBuffer_Release(&tail);
    return result;
}

/* ------------------------------------------------------------------ the timestamp scan of one batch */

/* The scan of find_timestamp over data[0:n]: 1 when it is done (*found says whether a record matched),
 * 0 when the Python scan must take the batch. */
static int
scan_timestamps(const uint8_t *p, Py_ssize_t n, Py_ssize_t count, int64_t base_offset, int64_t base_ts,
                int64_t fixed_ts, int has_fixed, int64_t target, int64_t start_offset, int *found, int64_t *found_ts,
                int64_t *found_offset)
{
    const uint8_t *end = p + n;
    *found = 0;
    if (count < 0)
        return 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t size, ts, od, offset, timestamp;
        if (read_varint(&p, end, &size) < 0 || size < 0 || size > end - p)
            return 0;
        const uint8_t *rec_end = p + size;
        if (end - p < 2)                /* the attributes byte, then the timestamp delta */
            return 0;
        p += 1;
        if (read_varlong(&p, end, &ts) < 0 || read_varint(&p, end, &od) < 0 || p > rec_end ||
            __builtin_add_overflow(base_offset, od, &offset))
            return 0;
        if (has_fixed)
            timestamp = fixed_ts;
        else if (__builtin_add_overflow(base_ts, ts, &timestamp))
            return 0;
        if (!*found && timestamp >= target && offset >= start_offset) {
            *found = 1;
            *found_ts = timestamp;
            *found_offset = offset;
        }
        p = rec_end;
    }
    return 1;
}

/*
 * find_timestamp(records, count, base_offset, base_timestamp, fixed_timestamp, has_fixed, target, start_offset)
 *   -> (timestamp, offset) | None | False
 *
 * FileRecords.searchForTimestamp's inner loop over one v2 batch's record section (decompressed):
 * the first record, in batch order, whose timestamp >= target and offset >= start_offset, None if
 * none is. As lookupd.format.records._stamps_v2 does, every record's length, timestamp delta and
 * offset delta are read, the rest skipped, over the whole batch (so a fault after the match is still
 * a fault). False on anything that scan rejects (or offsets and timestamps past int64): the caller
 * then runs the Python scan, which raises the exact error.
 */
static PyObject *
find_timestamp(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t count;
    long long base_offset, base_ts, fixed_ts, target, start_offset;
    int has_fixed;
    if (!PyArg_ParseTuple(args, "y*nLLLpLL", &view, &count, &base_offset, &base_ts, &fixed_ts, &has_fixed, &target,
                          &start_offset))
        return NULL;
    int found;
    int64_t found_ts = 0, found_offset = 0;
    int ok = scan_timestamps(view.buf, view.len, count, base_offset, base_ts, fixed_ts, has_fixed, target, start_offset,
                             &found, &found_ts, &found_offset);
    PyBuffer_Release(&view);
    if (!ok)
        Py_RETURN_FALSE;
    if (!found)
        Py_RETURN_NONE;
    return Py_BuildValue("(LL)", (long long)found_ts, (long long)found_offset);
}

/*
 * find_timestamp_batch(batch, target, start_offset) -> (timestamp, offset, partition leader epoch or None) | None
 *
 * find_timestamp over one whole v2 batch (its bytes from its first, nothing after), its header read
 * here and its records decompressed by _codecs.c when compressed: the matching record, or None when
 * the caller's full path must answer (no match, another magic, a codec form left to Python, any fault).
 */
static PyObject *
find_timestamp_batch(PyObject *self, PyObject *args)
{
    Py_buffer view;
    long long target, start_offset;
    if (!PyArg_ParseTuple(args, "y*LL", &view, &target, &start_offset))
        return NULL;
    const uint8_t *b = view.buf;
    int found = 0;
    int64_t found_ts = 0, found_offset = 0, epoch = -1;
    if (view.len >= V2_HEADER && b[16] == 2 && (int64_t)(int32_t)be32(b + 8) + LOG_OVERHEAD == view.len) {
        uint16_t attrs = be16(b + 21);
        int64_t count = (int32_t)be32(b + 57);
        const uint8_t *records = b + V2_HEADER;
        Py_ssize_t n = view.len - V2_HEADER;
        uint8_t *out;
        if (attrs & 0x07) {
            n = codecs_decompress(attrs & 0x07, records, (size_t)n, MAX_DECOMPRESSED, &out);
            records = out;
        }
        epoch = (int32_t)be32(b + 12);
        if (count > 0 && n >= 0 &&
            !scan_timestamps(records, n, (Py_ssize_t)count, (int64_t)be64(b), (int64_t)be64(b + 27),
                             (int64_t)be64(b + 35), (attrs & 0x08) != 0, target, start_offset, &found, &found_ts,
                             &found_offset))
            found = 0;
    }
    PyBuffer_Release(&view);
    if (!found)
        Py_RETURN_NONE;
    if (epoch == -1)
        return Py_BuildValue("(LLO)", (long long)found_ts, (long long)found_offset, Py_None);
    return Py_BuildValue("(LLL)", (long long)found_ts, (long long)found_offset, (long long)epoch);
}

/*
 * sound_batches(buffer) -> (bytes of the whole batches at its front, last offset of the last of them) | None
 *
 * The walk of `read`'s answer (lookupd.log.locallog._whole_batches) over batches it can pass in a
 * few operations: each whole batch at the front (FileLogInputStream's framing: fewer than 17 bytes
 * left, or a batch running past the end, ends the walk) a v2 batch whose size holds its header, whose
 * record count is not negative and whose CRC32C matches. The last offset is -1 when no batch is
 * whole. None when any whole batch is another kind: the Python walk then checks it and names a fault.
 */
static PyObject *
sound_batches(PyObject *self, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const uint8_t *buf = view.buf;
    Py_ssize_t end = view.len, pos = 0;
    int64_t last = -1;
    int sound = 1;
    while (pos < end - HEADER_UP_TO_MAGIC) {
        int64_t size = (int32_t)be32(buf + pos + 8);
        if (size < RECORD_OVERHEAD_V0 || size + LOG_OVERHEAD < V2_HEADER) {  /* corrupt, or no v2 header: Python */
            sound = 0;
            break;
        }
        if (pos > end - LOG_OVERHEAD - size)
            break;                      /* not whole: the walk ends here */
        const uint8_t *b = buf + pos;
        size += LOG_OVERHEAD;
        if (b[16] != 2 || (int32_t)be32(b + 57) < 0 ||
            CRC32C(b + CRC_START, (size_t)(size - CRC_START)) != be32(b + 17) ||
            __builtin_add_overflow((int64_t)be64(b), (int64_t)(int32_t)be32(b + 23), &last)) {
            sound = 0;
            break;
        }
        pos += size;
    }
    PyBuffer_Release(&view);
    if (!sound)
        Py_RETURN_NONE;
    return Py_BuildValue("(nL)", pos, (long long)last);
}

/* ------------------------------------------------------------------ Arrow validity bitmaps */

static inline int32_t ld_i32(const uint8_t *p) { int32_t v; memcpy(&v, p, 4); return v; }

/* Whether item i is valid: a flag byte not 0, or (`ends`, int32 list offsets) a list holding items. */
static inline int
item_valid(const uint8_t *p, Py_ssize_t i, int ends)
{
    return ends ? ld_i32(p + 4 * (i + 1)) > ld_i32(p + 4 * i) : p[i] != 0;
}

/* (Arrow validity bitmap of n items, null count): bit i of byte i/8, least significant first, the last
 * byte's spare bits zero (numpy.packbits(bitorder="little")); (None, 0) when nothing is null (Arrow
 * then needs no bitmap). */
static PyObject *
validity_of(const uint8_t *p, Py_ssize_t n, int ends)
{
    Py_ssize_t nulls = 0;
    for (Py_ssize_t i = 0; i < n; i++)     /* most columns have no nulls, and need no bitmap */
        nulls += !item_valid(p, i, ends);
    if (nulls == 0)
        return Py_BuildValue("(On)", Py_None, (Py_ssize_t)0);
    PyObject *bits = PyBytes_FromStringAndSize(NULL, (n + 7) / 8);
    if (bits == NULL)
        return NULL;
    uint8_t *b = (uint8_t *)PyBytes_AS_STRING(bits);
    for (Py_ssize_t j = 0; j < (n + 7) / 8; j++) {
        uint8_t byte = 0;
        for (Py_ssize_t k = 0; k < 8 && 8 * j + k < n; k++)
            byte |= (uint8_t)(item_valid(p, 8 * j + k, ends) << k);
        b[j] = byte;
    }
    return Py_BuildValue("(Nn)", bits, nulls);
}

/* validity_bitmap(flags) -> (bitmap or None, null count), of one byte per item, 0 for null. */
static PyObject *
validity_bitmap(PyObject *self, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *out = validity_of((const uint8_t *)view.buf, view.len, 0);
    PyBuffer_Release(&view);
    return out;
}

/* nonempty_bitmap(ends) -> (bitmap or None, count of empty lists), from n + 1 native int32 list offsets
 * (Arrow's layout): a record without headers is null there, as in Spark. */
static PyObject *
nonempty_bitmap(PyObject *self, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *out = NULL;
    if (view.len < 4 || view.len % 4 != 0)
        PyErr_SetString(PyExc_ValueError, "ends must hold at least one int32 offset");
    else
        out = validity_of((const uint8_t *)view.buf, view.len / 4 - 1, 1);
    PyBuffer_Release(&view);
    return out;
}

/*
 * spread_flag(facts, flag) -> bytes
 *
 * `facts` holds decode_frames' six int64 per batch: per record of every batch, in order, the int32
 * 1 when the batch's flags have `flag`, else 0 (numpy.repeat of the batches' flags over their
 * record counts).
 */
static PyObject *
spread_flag(PyObject *self, PyObject *args)
{
    Py_buffer view;
    long long flag;
    if (!PyArg_ParseTuple(args, "y*L", &view, &flag))
        return NULL;
    const Py_ssize_t entry = N_FACTS * 8;
    if (view.len % entry != 0) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "facts must hold whole entries of six int64");
        return NULL;
    }
    const uint8_t *f = (const uint8_t *)view.buf;
    Py_ssize_t batches = view.len / entry, total = 0;
    for (Py_ssize_t i = 0; i < batches; i++) {
        int64_t count;
        memcpy(&count, f + i * entry + F_COUNT * 8, 8);
        if (count < 0 || count > PY_SSIZE_T_MAX / 4 - total) {
            PyBuffer_Release(&view);
            PyErr_SetString(PyExc_ValueError, "facts hold a record count out of range");
            return NULL;
        }
        total += (Py_ssize_t)count;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, total * 4);
    if (out != NULL) {
        int32_t *o = (int32_t *)PyBytes_AS_STRING(out);
        for (Py_ssize_t i = 0; i < batches; i++) {
            int64_t count, flags;
            memcpy(&count, f + i * entry + F_COUNT * 8, 8);
            memcpy(&flags, f + i * entry + F_FLAGS * 8, 8);
            int32_t v = (flags & flag) != 0;
            for (int64_t k = 0; k < count; k++)
                *o++ = v;
        }
    }
    PyBuffer_Release(&view);
    return out;
}

/*
 * decompress(codec, data, max_size) -> bytes, or None when lookupd.format.compression must take it
 * (see _codecs.c).
 */
static PyObject *
py_decompress(PyObject *self, PyObject *args)
{
    int codec;
    Py_buffer view;
    Py_ssize_t max_size;
    if (!PyArg_ParseTuple(args, "iy*n", &codec, &view, &max_size))
        return NULL;
    uint8_t *out;
    Py_ssize_t n = max_size < 0 ? -1 : codecs_decompress(codec, view.buf, (size_t)view.len, (size_t)max_size, &out);
    PyBuffer_Release(&view);
    if (n < 0)
        Py_RETURN_NONE;
    return PyBytes_FromStringAndSize((const char *)out, n);
}

static PyObject *
py_codecs(PyObject *self, PyObject *unused)
{
    return Py_BuildValue("{s:O,s:O,s:O,s:O}", "gzip", codecs_available(CODEC_GZIP) ? Py_True : Py_False,
                         "snappy", codecs_available(CODEC_SNAPPY) ? Py_True : Py_False,
                         "lz4", codecs_available(CODEC_LZ4) ? Py_True : Py_False,
                         "zstd", codecs_available(CODEC_ZSTD) ? Py_True : Py_False);
}

static PyMethodDef methods[] = {
    {"decompress", py_decompress, METH_VARARGS,
     "decompress(codec, data, max_size) -> the batch records' bytes, or None when the Python codecs must take them."},
    {"codecs", py_codecs, METH_NOARGS, "codecs() -> {codec name: whether its library was found}."},
    {"decode_frames", decode_frames, METH_VARARGS,
     "decode_frames(buffer, start, end, file_position, headers, facts, *columns) -> where it stopped "
     "(see the comment in _decode.c)."},
    {"render_batch", render_batch, METH_VARARGS,
     "render_batch(records, count, base_offset, base_timestamp, fixed_timestamp, has_fixed, head, mid, tail, key) -> "
     "(lines, offsets, starts) of the batch's records as JSON lines, or None (see _decode.c)."},
    {"find_timestamp", find_timestamp, METH_VARARGS,
     "find_timestamp(records, count, base_offset, base_timestamp, fixed_timestamp, has_fixed, target, start_offset) "
     "-> (timestamp, offset), None, or False when the Python scan must take the batch (see _decode.c)."},
    {"find_timestamp_batch", find_timestamp_batch, METH_VARARGS,
     "find_timestamp_batch(batch, target, start_offset) -> (timestamp, offset, leader epoch or None), or None when "
     "the Python path must answer (see _decode.c)."},
    {"sound_batches", sound_batches, METH_O,
     "sound_batches(buffer) -> (bytes of its whole sound v2 batches, last offset), or None (see _decode.c)."},
    {"validity_bitmap", validity_bitmap, METH_O,
     "validity_bitmap(flags) -> (Arrow validity bitmap or None, null count) of one byte per item, 0 for null."},
    {"nonempty_bitmap", nonempty_bitmap, METH_O,
     "nonempty_bitmap(ends) -> (Arrow validity bitmap or None, empty count): the lists of int32 offsets that hold items."},
    {"spread_flag", spread_flag, METH_VARARGS,
     "spread_flag(facts, flag) -> int32 per record: 1 where its batch's flags have `flag` (see _decode.c)."},
    {"crc32c", py_crc32c, METH_O, "crc32c(data) -> the CRC32C (Castagnoli) of the bytes."},
    {"decode_v2", decode_v2, METH_VARARGS,
     "decode_v2(records, count, base_offset, base_timestamp, fixed_timestamp, has_fixed, headers, *columns) -> "
     "whether the batch's records were appended to the 14 bytearray columns (else nothing was)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_decode", "Columnar decoding of Kafka v2 record batches.", -1, methods,
};

PyMODINIT_FUNC
PyInit__decode(void)
{
    crc_init();
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    have_hw = __builtin_cpu_supports("sse4.2");
    if (have_hw)
        crc_shift_init();
#endif
    return PyModule_Create(&module);
}
