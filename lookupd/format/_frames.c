/* Walks over the batch frames of a buffer (FileLogInputStream's framing). */
#include "_decode.h"
#include "_codecs.h"

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
PyObject *
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
    if (columns_take(cols, &o) < 0 || !PyByteArray_Check(facts)) {
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
    if (columns_reserve(&o, stop - start, with_headers) < 0 ||
        PyByteArray_Resize(facts, facts0 + ((stop - start) / V2_HEADER + 1) * N_FACTS * 8) < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    char *facts_at = PyByteArray_AS_STRING(facts) + facts0;
    while (stop - pos >= V2_HEADER) {
        const uint8_t *b = buf + pos;
        int64_t length = (int32_t)be32(b + LENGTH_AT);
        Py_ssize_t size = (Py_ssize_t)length + LOG_OVERHEAD;
        if (length < V2_HEADER - LOG_OVERHEAD || size > stop - pos || b[MAGIC_AT] != 2)
            break;
        uint16_t attrs = be16(b + ATTRIBUTES_AT);
        if (crc32c_of(b + CRC_START, (size_t)(size - CRC_START)) != be32(b + CRC_AT))
            break;                  /* the caller raises the exact error */
        int64_t base_offset = (int64_t)be64(b + BASE_OFFSET_AT);
        int64_t count = (int32_t)be32(b + RECORD_COUNT_AT);
        if (count < 0)
            break;
        int64_t last_offset;
        if (__builtin_add_overflow(base_offset, (int64_t)(int32_t)be32(b + LAST_OFFSET_DELTA_AT), &last_offset))
            break;                  /* beyond int64: the caller reports it */
        if (!(attrs & ATTR_CONTROL) && count > 0) {   /* a control batch holds no data records */
            int64_t base_ts = (int64_t)be64(b + BASE_TIMESTAMP_AT), max_ts = (int64_t)be64(b + MAX_TIMESTAMP_AT);
            int fixed = (attrs & ATTR_LOG_APPEND_TIME) != 0;
            const uint8_t *records = b + V2_HEADER;
            Py_ssize_t records_len = size - V2_HEADER;
            if (attrs & ATTR_CODEC) {  /* compressed: decompressed here when _codecs.c takes it, else by the caller */
                uint8_t *out;
                records_len = codecs_decompress(attrs & ATTR_CODEC, records, (size_t)records_len, MAX_DECOMPRESSED, &out);
                if (records_len < 0)
                    break;
                /* room for these records and, as reserved at the start, for all after this batch; a
                 * column short of that gets half as much again, as the batches after it may grow
                 * the columns too, and every resize may copy them */
                Py_ssize_t need = records_len + (stop - pos - size);
                if (columns_grow(&o, need, need / 2, with_headers) < 0) {
                    err = 1;
                    break;
                }
                records = out;
            }
            if (!decode_records(&o, records, records_len, (Py_ssize_t)count, base_offset, base_ts, max_ts, fixed,
                                with_headers))
                break;
            int64_t f[N_FACTS] = {file_position + pos, base_offset, last_offset,
                                  (int64_t)be64(b + PRODUCER_ID_AT), ((attrs & ATTR_TRANSACTIONAL) ? FLAG_TRANSACTIONAL : 0) |
                                  (fixed ? FLAG_LOG_APPEND_TIME : 0), count};
            memcpy(facts_at + nfacts * sizeof f, f, sizeof f);
            nfacts++;
        }
        pos += size;
    }
    columns_finish(&o);
    PyByteArray_Resize(facts, facts0 + nfacts * N_FACTS * 8);
    PyBuffer_Release(&view);
    if (err)
        return NULL;
    return PyLong_FromSsize_t(pos);  /* fewer bytes than a header left: the caller judges (cut batch or not) */
}

/*
 * sound_batches(buffer) -> (bytes of the whole batches at its front, last offset of the last of them) | None
 *
 * The walk of `read`'s answer (lookupd.format.batch.whole_batches) over batches it can pass in a
 * few operations: each whole batch at the front (FileLogInputStream's framing: fewer than 17 bytes
 * left, or a batch running past the end, ends the walk) a v2 batch whose size holds its header, whose
 * record count is not negative and whose CRC32C matches. The last offset is -1 when no batch is
 * whole. None when any whole batch is another kind: the Python walk then checks it and names a fault.
 */
PyObject *
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
        int64_t size = (int32_t)be32(buf + pos + LENGTH_AT);
        if (size < RECORD_OVERHEAD_V0 || size + LOG_OVERHEAD < V2_HEADER) {  /* corrupt, or no v2 header: Python */
            sound = 0;
            break;
        }
        if (pos > end - LOG_OVERHEAD - size)
            break;                      /* not whole: the walk ends here */
        const uint8_t *b = buf + pos;
        size += LOG_OVERHEAD;
        if (b[MAGIC_AT] != 2 || (int32_t)be32(b + RECORD_COUNT_AT) < 0 ||
            crc32c_of(b + CRC_START, (size_t)(size - CRC_START)) != be32(b + CRC_AT) ||
            __builtin_add_overflow((int64_t)be64(b + BASE_OFFSET_AT), (int64_t)(int32_t)be32(b + LAST_OFFSET_DELTA_AT),
                                   &last)) {
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
