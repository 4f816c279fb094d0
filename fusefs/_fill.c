/* fusefs._fill: getattr's answer into a `struct stat`, and a listing into libfuse's READDIRPLUS buffer.
 *
 * A listing of 10,000 segments is 60,000 entries; in Python each costs a struct pack and a ctypes
 * call of libfuse's filler (a few microseconds), here a few dozen nanoseconds. The attributes are
 * getattr's dicts (times in ns), read with the same defaults as mfusepy's set_st_attrs (a missing
 * field is 0). fusefs/binding.py keeps the Python loop as the reference and for builds without a
 * compiler; tests/test_fusefs_units.py requires both to hand libfuse the same entries.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

/* libfuse 3's fuse_fill_dir_t; returns 1 when the buffer is full */
typedef int (*fill_dir_t)(void *buf, const char *name, const struct stat *stbuf, off_t off, int flags);

#define FILL_DIR_PLUS (1 << 1)
#define NS 1000000000LL

static PyObject *k_mode, *k_nlink, *k_uid, *k_gid, *k_size, *k_blksize, *k_blocks, *k_atime, *k_mtime, *k_ctime;

/* attrs[key] as a long long (0 when absent); -1 with an exception set on a value that is not an int in range */
static int field(PyObject *attrs, PyObject *key, long long *out)
{
    PyObject *v = PyDict_GetItemWithError(attrs, key);
    if (v == NULL) {
        *out = 0;
        return PyErr_Occurred() ? -1 : 0;
    }
    int overflow = 0;
    *out = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow) {
        PyErr_Format(PyExc_OverflowError, "%U does not fit a struct stat field", key);
        return -1;
    }
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

static int set_time(struct timespec *ts, long long ns)
{
    long long sec = ns / NS, rem = ns % NS;
    if (rem < 0) { /* floor division, as Python's divmod */
        rem += NS;
        sec -= 1;
    }
    ts->tv_sec = (time_t)sec;
    ts->tv_nsec = (long)rem;
    return 0;
}

/* *st = attrs; -1 with an exception set when attrs is not a dict of ints */
static int to_stat(PyObject *attrs, struct stat *st)
{
    if (!PyDict_Check(attrs)) {
        PyErr_SetString(PyExc_TypeError, "attributes must be a dict");
        return -1;
    }
    long long mode, nlink, uid, gid, size, blksize, blocks, at, mt, ct;
    if (field(attrs, k_mode, &mode) || field(attrs, k_nlink, &nlink) || field(attrs, k_uid, &uid) ||
        field(attrs, k_gid, &gid) || field(attrs, k_size, &size) || field(attrs, k_blksize, &blksize) ||
        field(attrs, k_blocks, &blocks) || field(attrs, k_atime, &at) || field(attrs, k_mtime, &mt) ||
        field(attrs, k_ctime, &ct))
        return -1;
    memset(st, 0, sizeof *st);
    st->st_mode = (mode_t)mode;
    st->st_nlink = (nlink_t)nlink;
    st->st_uid = (uid_t)uid;
    st->st_gid = (gid_t)gid;
    st->st_size = (off_t)size;
    st->st_blksize = (blksize_t)blksize;
    st->st_blocks = (blkcnt_t)blocks;
    set_time(&st->st_atim, at);
    set_time(&st->st_mtim, mt);
    set_time(&st->st_ctim, ct);
    return 0;
}

static PyObject *fill_stat(PyObject *self, PyObject *args)
{
    unsigned long long address;
    PyObject *attrs;
    if (!PyArg_ParseTuple(args, "KO:fill_stat", &address, &attrs))
        return NULL;
    if (address == 0) {
        PyErr_SetString(PyExc_ValueError, "fill_stat: null address");
        return NULL;
    }
    struct stat st;
    if (to_stat(attrs, &st) < 0)
        return NULL;
    memcpy((void *)(uintptr_t)address, &st, sizeof st);
    Py_RETURN_NONE;
}

/* fill_dir(filler, buf, entries, start, plus) -> the index of the first entry not handed over
 * (len(entries) when all were). entries: a list of (name: str, attrs: dict | None); entry i goes
 * with offset i + 1, with its attributes when `plus` and it has them. */
static PyObject *fill_dir(PyObject *self, PyObject *args)
{
    unsigned long long filler_address, buf;
    PyObject *entries;
    Py_ssize_t start;
    int plus;
    if (!PyArg_ParseTuple(args, "KKO!np:fill_dir", &filler_address, &buf, &PyList_Type, &entries, &start, &plus))
        return NULL;
    if (filler_address == 0) {
        PyErr_SetString(PyExc_ValueError, "fill_dir: null filler");
        return NULL;
    }
    fill_dir_t filler = (fill_dir_t)(uintptr_t)filler_address;
    Py_ssize_t n = PyList_GET_SIZE(entries);
    if (start < 0)
        start = 0;
    if (start > n)
        start = n;
    struct stat st;
    Py_ssize_t i;
    for (i = start; i < n; i++) {
        PyObject *entry = PyList_GET_ITEM(entries, i);
        if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 2) {
            PyErr_Format(PyExc_TypeError, "fill_dir: entry %zd is not a (name, attributes) pair", i);
            return NULL;
        }
        PyObject *name = PyTuple_GET_ITEM(entry, 0), *attrs = PyTuple_GET_ITEM(entry, 1);
        const char *cname = PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
        if (cname == NULL) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_TypeError, "fill_dir: entry %zd's name is not a str", i);
            return NULL;
        }
        int full;
        if (plus && attrs != Py_None) {
            if (to_stat(attrs, &st) < 0)
                return NULL;
            full = filler((void *)(uintptr_t)buf, cname, &st, (off_t)(i + 1), FILL_DIR_PLUS);
        } else {
            full = filler((void *)(uintptr_t)buf, cname, NULL, (off_t)(i + 1), 0);
        }
        if (full)
            break;
    }
    return PyLong_FromSsize_t(i);
}

static PyMethodDef methods[] = {
    {"fill_stat", fill_stat, METH_VARARGS, "fill_stat(address, attrs): the struct stat at address = getattr's attrs."},
    {"fill_dir", fill_dir, METH_VARARGS,
     "fill_dir(filler, buf, entries, start, plus) -> next: hand entries[start:] to libfuse's filler."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fill", NULL, -1, methods};

PyMODINIT_FUNC PyInit__fill(void)
{
#define KEY(var, text) if ((var = PyUnicode_InternFromString(text)) == NULL) return NULL;
    KEY(k_mode, "st_mode") KEY(k_nlink, "st_nlink") KEY(k_uid, "st_uid") KEY(k_gid, "st_gid")
    KEY(k_size, "st_size") KEY(k_blksize, "st_blksize") KEY(k_blocks, "st_blocks")
    KEY(k_atime, "st_atime") KEY(k_mtime, "st_mtime") KEY(k_ctime, "st_ctime")
#undef KEY
    return PyModule_Create(&module);
}
