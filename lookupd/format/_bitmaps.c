/* Arrow validity bitmaps from the columns, and a batch flag spread over its records. */
#include "_decode.h"

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
PyObject *
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
PyObject *
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
PyObject *
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
