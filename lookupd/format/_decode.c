/*
 * lookupd.format._decode: Kafka v2 record batches decoded in C, for lookupd.format.columnar (columns),
 * render (JSON lines), records (the timestamp scan) and lookupd.log (the sound-batch check of `read`).
 *
 * This file is the module: its method table, and the codecs of _codecs.c for Python. Each concern is
 * a file of its own (see _decode.h). Every function answers exactly as the Python reference would, or
 * hands the input back (None or False) for the reference to answer, naming the fault.
 */
#include "_decode.h"
#include "_codecs.h"

#include <sys/random.h>
#include <time.h>

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
     "(see _frames.c)."},
    {"render_batch", render_batch, METH_VARARGS,
     "render_batch(records, count, base_offset, base_timestamp, fixed_timestamp, has_fixed, head, mid, tail, key) -> "
     "(lines, offsets, starts, holds_wire) of the batch's records as JSON lines, or None (see _json.c)."},
    {"find_timestamp", find_timestamp, METH_VARARGS,
     "find_timestamp(records, count, base_offset, base_timestamp, fixed_timestamp, has_fixed, target, start_offset) "
     "-> (timestamp, offset), None, or False when the Python scan must take the batch (see _timestamps.c)."},
    {"find_timestamp_batch", find_timestamp_batch, METH_VARARGS,
     "find_timestamp_batch(batch, target, start_offset) -> (timestamp, offset, leader epoch or None), or None when "
     "the Python path must answer (see _timestamps.c)."},
    {"sound_batches", sound_batches, METH_O,
     "sound_batches(buffer) -> (bytes of its whole sound v2 batches, last offset), or None (see _frames.c)."},
    {"validity_bitmap", validity_bitmap, METH_O,
     "validity_bitmap(flags) -> (Arrow validity bitmap or None, null count) of one byte per item, 0 for null."},
    {"nonempty_bitmap", nonempty_bitmap, METH_O,
     "nonempty_bitmap(ends) -> (Arrow validity bitmap or None, empty count): the lists of int32 offsets that hold items."},
    {"spread_flag", spread_flag, METH_VARARGS,
     "spread_flag(facts, flag) -> int32 per record: 1 where its batch's flags have `flag` (see _bitmaps.c)."},
    {"commit_runs", commit_runs, METH_VARARGS,
     "commit_runs(buffer, start, end, table, note_tombstones) -> (stop, next offset, tombstoned, removed groups, "
     "transactional): the offset commits from start applied to a CommitTable (see _offsets.c)."},
    {"crc32c", py_crc32c, METH_O, "crc32c(data) -> the CRC32C (Castagnoli) of the bytes."},
    {"decode_v2", decode_v2, METH_VARARGS,
     "decode_v2(records, count, base_offset, base_timestamp, fixed_timestamp, has_fixed, headers, *columns) -> "
     "whether the batch's records were appended to the 14 bytearray columns (else nothing was)."},
    {"avro_program", avro_program, METH_VARARGS,
     "avro_program(nodes, arrow) -> an Avro schema's program, compiled by lookupd.format.avrocolumns (see _avro.c)."},
    {"avro_json", avro_json, METH_VARARGS,
     "avro_json(programs, validity, offsets, data, offset, length) -> (status, ids, missing, ends, text) of a binary "
     "column's values decoded to JSON text, or None (see _avro.c)."},
    {"avro_arrow", avro_arrow, METH_VARARGS,
     "avro_arrow(schema_id, program, validity, offsets, data, offset, length) -> (status, ids, columns) of a binary "
     "column's values decoded into a struct's Arrow columns (see _avro.c)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_decode", "Columnar decoding of Kafka v2 record batches.", -1, methods,
};

PyMODINIT_FUNC
PyInit__decode(void)
{
    crc32c_init();
    uint64_t seed;
    if (getrandom(&seed, sizeof seed, GRND_NONBLOCK) != (ssize_t)sizeof seed)
        seed = (uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)&seed;
    offsets_seed(seed);
    if (PyType_Ready(&CommitTableType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddObjectRef(m, "CommitTable", (PyObject *)&CommitTableType) < 0)
        Py_CLEAR(m);
    return m;
}
