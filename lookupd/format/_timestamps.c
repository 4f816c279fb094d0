/* The timestamp scan of one v2 batch (FileRecords.searchForTimestamp's inner loop). */
#include "_decode.h"
#include "_codecs.h"

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
PyObject *
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
PyObject *
find_timestamp_batch(PyObject *self, PyObject *args)
{
    Py_buffer view;
    long long target, start_offset;
    if (!PyArg_ParseTuple(args, "y*LL", &view, &target, &start_offset))
        return NULL;
    const uint8_t *b = view.buf;
    int found = 0;
    int64_t found_ts = 0, found_offset = 0, epoch = -1;
    if (view.len >= V2_HEADER && b[MAGIC_AT] == 2 && (int64_t)(int32_t)be32(b + LENGTH_AT) + LOG_OVERHEAD == view.len) {
        uint16_t attrs = be16(b + ATTRIBUTES_AT);
        int64_t count = (int32_t)be32(b + RECORD_COUNT_AT);
        const uint8_t *records = b + V2_HEADER;
        Py_ssize_t n = view.len - V2_HEADER;
        uint8_t *out;
        if (attrs & ATTR_CODEC) {
            n = codecs_decompress(attrs & ATTR_CODEC, records, (size_t)n, MAX_DECOMPRESSED, &out);
            records = out;
        }
        epoch = (int32_t)be32(b + LEADER_EPOCH_AT);
        if (count > 0 && n >= 0 &&
            !scan_timestamps(records, n, (Py_ssize_t)count, (int64_t)be64(b + BASE_OFFSET_AT),
                             (int64_t)be64(b + BASE_TIMESTAMP_AT), (int64_t)be64(b + MAX_TIMESTAMP_AT),
                             (attrs & ATTR_LOG_APPEND_TIME) != 0, target, start_offset, &found, &found_ts,
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
