/*
 * Kafka v2 record sections (DefaultRecord) into column buffers that grow across batches: offsets and
 * timestamps (int64), keys and values in Arrow's binary layout (a validity byte per record, int32 end
 * offsets, one data buffer), and headers as Arrow list<struct<key: string, value: binary>> buffers.
 * No Python object is made per record.
 *
 * Every read is bounded by the record section's length. The decoder does not explain
 * faults: on anything the Python decoder (lookupd.format.records) would reject, and on the
 * rare inputs it treats specially (header keys that are not valid UTF-8, offsets or
 * timestamps beyond int64), it leaves the columns as they were and returns False; the
 * caller then runs the Python decoder on the batch, which raises the exact error (naming
 * file and byte position) or handles the special case. So both paths give the same records
 * and the same errors by construction.
 */
#include "_decode.h"

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

int
columns_grow(Out *o, Py_ssize_t bytes, Py_ssize_t slack, int with_headers)
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

int
columns_reserve(Out *o, Py_ssize_t bytes, int with_headers)
{
    for (int i = 0; i < N_COLUMNS; i++) {
        o->used[i] = o->cap[i] = PyByteArray_GET_SIZE(o->ba[i]);
        o->at[i] = PyByteArray_AS_STRING(o->ba[i]);
    }
    if (columns_grow(o, bytes, 0, with_headers) < 0) {
        columns_finish(o);
        return -1;
    }
    return 0;
}

void
columns_finish(Out *o)
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

int
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

int
columns_take(PyObject *const *items, Out *o)
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
PyObject *
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
    if (columns_take(cols, &o) == 0 && columns_reserve(&o, view.len, with_headers) == 0) {
        r = decode_records(&o, (const uint8_t *)view.buf, view.len, count, base_offset, base_ts, fixed_ts, has_fixed,
                           with_headers);
        columns_finish(&o);
    }
    PyBuffer_Release(&view);
    if (r < 0)
        return NULL;
    return PyBool_FromLong(r);
}
