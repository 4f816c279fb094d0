/*
 * Avro values in Confluent's wire format, a column of them per call, decoded as fastavro reads them
 * with the writer's schema (lookupd.format.avrocolumns compiles the schema into a program of nodes):
 *
 *   avro_json    each value as the compact JSON text lookupd.format.wire's Avro codec writes
 *                (`json_text`: ensure_ascii off, NaN and infinities as strings);
 *   avro_arrow   each value into the Arrow columns of a struct (the Spark source's struct mode).
 *
 * Dates, timestamps (UTC and local) and UUIDs are read as fastavro's logical readers convert them, and
 * shown as isoformat() and str() write those objects; decimals and times of day are not read here.
 *
 * A value this code is not sure to read exactly as fastavro does is handed back (status 2) for the
 * reference path, which gives its answer or names its fault: bytes that end early or are left over,
 * a varint longer than fastavro's, a union or enum index out of range, a negative length, text that
 * is not strict UTF-8, a map holding a key twice (fastavro's dict keeps one), an array or map block
 * counting more items than bytes remain, nesting deeper than MAX_DEPTH, an int outside int32 for a
 * struct's int32 column, a date or time outside Python's years 1 to 9999, a UUID not written as str()
 * writes it. So every answer given here is the reference's, and every fault is its.
 */
#include "_decode.h"

#include <math.h>

#define MAX_DEPTH 64                    /* nested values read here; deeper ones go to fastavro */
#define MAX_OUT ((Py_ssize_t)INT32_MAX) /* bytes of an Arrow column with int32 offsets */
#define CAPSULE "lookupd.format._avro.program"

enum {
    K_NULL, K_BOOLEAN, K_INT, K_LONG, K_FLOAT, K_DOUBLE, K_BYTES, K_STRING, K_FIXED, K_ENUM, K_RECORD, K_ARRAY,
    K_MAP, K_UNION,
    /* the logical types fastavro converts that are read here: int date, long timestamp-millis and
     * -micros (UTC datetimes), local-timestamp-millis and -micros (naive ones), string uuid */
    K_DATE, K_TS_MILLIS, K_TS_MICROS, K_LOCAL_TS_MILLIS, K_LOCAL_TS_MICROS, K_UUID,
    N_KINDS
};

/* Python's dates and datetimes, from 0001-01-01 to 9999-12-31: days and microseconds from 1970-01-01. */
#define MIN_DAY (-719162LL)
#define MAX_DAY 2932896LL
#define US_PER_DAY 86400000000LL
#define MIN_US (MIN_DAY * US_PER_DAY)
#define MAX_US ((MAX_DAY + 1) * US_PER_DAY - 1)

/* A node of a program: one Avro type of the writer's schema. In a JSON program, RECORD texts are
 * '{"name":' then ',"name2":' and so on, ENUM texts its symbols as JSON strings; in an Arrow program
 * ENUM texts are the symbols' UTF-8 bytes, and every node but NULL and UNION has a column of its own
 * (the program is a tree, its UNIONs of NULL and one other type: the other's column, null or not). */
typedef struct {
    int kind;
    Py_ssize_t size;            /* FIXED: bytes; ENUM: symbols; RECORD: fields; UNION: branches */
    Py_ssize_t *child;          /* RECORD: fields' nodes; ARRAY, MAP: the item's node; UNION: branches' */
    const char **text;
    Py_ssize_t *text_len;
} Node;

typedef struct {
    Py_ssize_t n;
    Node *nodes;
    int arrow;                  /* for avro_arrow, else for avro_json */
    PyObject *keep;             /* the program's tuple: the texts point into its bytes */
} Program;

/* ------------------------------------------------------------------ growable buffers */

typedef struct {
    char *p;
    Py_ssize_t len, cap;
} Buf;

static int
buf_reserve(Buf *b, Py_ssize_t more)
{
    if (b->len + more <= b->cap)
        return 0;
    Py_ssize_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + more)
        cap *= 2;
    char *p = PyMem_Realloc(b->p, (size_t)cap);
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

static inline int
buf_put(Buf *b, const void *s, Py_ssize_t n)
{
    if (n == 0)  /* b->p or s may be NULL then, and memcpy must not be given NULL even for 0 bytes */
        return 0;
    if (buf_reserve(b, n) < 0)
        return -1;
    memcpy(b->p + b->len, s, (size_t)n);
    b->len += n;
    return 0;
}

static PyObject *
buf_bytes(const Buf *b)
{
    return PyBytes_FromStringAndSize(b->p ? b->p : "", b->len);
}

/* ------------------------------------------------------------------ programs */

static void
program_free(PyObject *capsule)
{
    Program *pg = PyCapsule_GetPointer(capsule, CAPSULE);
    if (pg == NULL)
        return;
    for (Py_ssize_t i = 0; i < pg->n; i++) {
        PyMem_Free(pg->nodes[i].child);
        PyMem_Free((void *)pg->nodes[i].text);
        PyMem_Free(pg->nodes[i].text_len);
    }
    PyMem_Free(pg->nodes);
    Py_XDECREF(pg->keep);
    PyMem_Free(pg);
}

static int
bad_program(Py_ssize_t i, const char *why)
{
    PyErr_Format(PyExc_ValueError, "Avro program node %zd: %s", i, why);
    return -1;
}

/* One node from its tuple (kind, size, children, texts), checked against the program's length. */
static int
node_take(Node *node, PyObject *t, Py_ssize_t i, Py_ssize_t n, int arrow)
{
    PyObject *children, *texts;
    int kind;
    Py_ssize_t size;
    if (!PyTuple_Check(t) || !PyArg_ParseTuple(t, "inO!O!", &kind, &size, &PyTuple_Type, &children,
                                               &PyTuple_Type, &texts))
        return PyErr_Occurred() ? -1 : bad_program(i, "not a tuple");
    if (kind < 0 || kind >= N_KINDS || size < 0)
        return bad_program(i, "kind or size out of range");
    node->kind = kind;
    node->size = size;
    Py_ssize_t nc = PyTuple_GET_SIZE(children), nt = PyTuple_GET_SIZE(texts);
    Py_ssize_t want_c = kind == K_RECORD || kind == K_UNION ? size : kind == K_ARRAY || kind == K_MAP ? 1 : 0;
    Py_ssize_t want_t = (kind == K_RECORD && !arrow) || kind == K_ENUM ? size : 0;
    if (nc != want_c || nt != want_t || (kind == K_UNION && size == 0))
        return bad_program(i, "children or texts do not match its kind");
    node->child = PyMem_Calloc((size_t)nc + 1, sizeof(Py_ssize_t));
    node->text = PyMem_Calloc((size_t)nt + 1, sizeof(char *));
    node->text_len = PyMem_Calloc((size_t)nt + 1, sizeof(Py_ssize_t));
    if (node->child == NULL || node->text == NULL || node->text_len == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t c = 0; c < nc; c++) {
        Py_ssize_t to = PyLong_AsSsize_t(PyTuple_GET_ITEM(children, c));
        if (to == -1 && PyErr_Occurred())
            return -1;
        if (to < 0 || to >= n)
            return bad_program(i, "a child is not a node");
        node->child[c] = to;
    }
    for (Py_ssize_t k = 0; k < nt; k++) {
        PyObject *b = PyTuple_GET_ITEM(texts, k);
        if (!PyBytes_Check(b))
            return bad_program(i, "a text is not bytes");
        node->text[k] = PyBytes_AS_STRING(b);
        node->text_len[k] = PyBytes_GET_SIZE(b);
    }
    return 0;
}

/* avro_program(nodes, arrow) -> the program of a tuple of node tuples (node 0 the value's), for avro_arrow
 * (arrow true) or avro_json. */
PyObject *
avro_program(PyObject *self, PyObject *args)
{
    PyObject *arg;
    int arrow;
    if (!PyArg_ParseTuple(args, "O!p", &PyTuple_Type, &arg, &arrow))
        return NULL;
    if (PyTuple_GET_SIZE(arg) == 0) {
        PyErr_SetString(PyExc_ValueError, "an Avro program has a node at least");
        return NULL;
    }
    Program *pg = PyMem_Calloc(1, sizeof(Program));
    if (pg == NULL)
        return PyErr_NoMemory();
    pg->arrow = arrow;
    pg->n = PyTuple_GET_SIZE(arg);
    pg->keep = Py_NewRef(arg);
    PyObject *capsule = NULL;
    pg->nodes = PyMem_Calloc((size_t)pg->n, sizeof(Node));
    if (pg->nodes == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    capsule = PyCapsule_New(pg, CAPSULE, program_free);
    if (capsule == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < pg->n; i++)
        if (node_take(&pg->nodes[i], PyTuple_GET_ITEM(arg, i), i, pg->n, arrow) < 0) {
            Py_DECREF(capsule);     /* frees the program */
            return NULL;
        }
    return capsule;
fail:
    if (capsule == NULL) {
        PyMem_Free(pg->nodes);
        Py_DECREF(pg->keep);
        PyMem_Free(pg);
    }
    return NULL;
}

/* ------------------------------------------------------------------ reading Avro's binary encoding */

/* The reader of one value: the bytes left, and the keys of the maps being read (to find a key read
 * twice: fastavro's dict would keep one). */
typedef struct {
    const uint8_t *p, *end;
    struct { const uint8_t *s; Py_ssize_t n; } *keys;
    Py_ssize_t nkeys, capkeys;
} In;

/* A length (bytes, string) or a block count: 1, 0 to hand the value back. */
static inline int
read_length(In *in, int64_t *n)
{
    return read_varlong(&in->p, in->end, n) == 0 && *n >= 0 && *n <= in->end - in->p;
}

/* The next item of an array or map, whose blocks give their item counts (a negative count is followed
 * by the block's byte size, skipped): 1 when an item follows (*left counts the block's items after it,
 * 0 before the first block), END after the last, 0 to hand the value back (it ends early, or a block
 * counts more items than bytes remain, which a hostile value could do with items of no bytes). */
#define END 2

static int
next_item(In *in, int64_t *left)
{
    if (*left == 0) {
        if (read_varlong(&in->p, in->end, left) != 0)
            return 0;
        if (*left < 0) {
            int64_t size;
            if (*left == INT64_MIN || read_varlong(&in->p, in->end, &size) != 0)
                return 0;
            *left = -*left;
        }
        if (*left == 0)
            return END;
        if (*left > in->end - in->p)
            return 0;
    }
    (*left)--;
    return 1;
}

/* Note a map's key; 0 when the same map (keys from `first` on) already holds it, -1 on no memory. */
static int
key_new(In *in, Py_ssize_t first, const uint8_t *s, Py_ssize_t n)
{
    for (Py_ssize_t i = first; i < in->nkeys; i++)
        if (in->keys[i].n == n && memcmp(in->keys[i].s, s, (size_t)n) == 0)
            return 0;
    if (in->nkeys == in->capkeys) {
        Py_ssize_t cap = in->capkeys ? in->capkeys * 2 : 64;
        void *k = PyMem_Realloc(in->keys, (size_t)cap * sizeof(*in->keys));
        if (k == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        in->keys = k;
        in->capkeys = cap;
    }
    in->keys[in->nkeys].s = s;
    in->keys[in->nkeys].n = n;
    in->nkeys++;
    return 1;
}

/* A map's keys are compared pairwise: a map of more keys than this goes to fastavro. */
#define MAX_MAP_KEYS 256

/* A map's key (its keys from `keys_from` on): 1 and *key, *len past it, 0 to hand the value back (the
 * key is not UTF-8 or is there already, or the map holds too many to compare), -1 on no memory. */
static int
read_key(In *in, Py_ssize_t keys_from, const uint8_t **key, int64_t *len)
{
    if (in->nkeys - keys_from >= MAX_MAP_KEYS || !read_length(in, len) || !is_utf8(in->p, *len))
        return 0;
    int rc = key_new(in, keys_from, in->p, *len);
    if (rc == 1) {
        *key = in->p;
        in->p += *len;
    }
    return rc;
}

static inline double
le_float(const uint8_t *p)
{
    uint32_t u;
    float f;
    memcpy(&u, p, 4);
    memcpy(&f, &u, 4);          /* Avro writes little-endian, as x86 and arm64 store */
    return (double)f;
}

static inline double
le_double(const uint8_t *p)
{
    double d;
    memcpy(&d, p, 8);
    return d;
}

/* A date (days) or timestamp (microseconds) from 1970-01-01 as fastavro converts it: 1, or 0 when
 * its date or datetime would be out of Python's range (fastavro fails: the reference path says how). */
static int
read_time(const Node *node, In *in, int64_t *out)
{
    int64_t v;
    if (read_varlong(&in->p, in->end, &v) != 0)
        return 0;
    switch (node->kind) {
    case K_DATE:
        *out = v;
        return v >= MIN_DAY && v <= MAX_DAY;
    case K_TS_MILLIS:
    case K_LOCAL_TS_MILLIS:
        if (v < MIN_US / 1000 || v > MAX_US / 1000)
            return 0;
        *out = v * 1000;
        return 1;
    default:
        *out = v;
        return v >= MIN_US && v <= MAX_US;
    }
}

/* A UUID's text as fastavro reads it then str(UUID) writes it, when it is already that: 36 characters,
 * lowercase hex and hyphens at 8, 13, 18, 23 (any other form goes to the reference path). */
static int
canonical_uuid(const uint8_t *s, int64_t n)
{
    if (n != 36)
        return 0;
    for (int i = 0; i < 36; i++) {
        uint8_t c = s[i];
        if (i == 8 || i == 13 || i == 18 || i == 23 ? c != '-' : !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            return 0;
    }
    return 1;
}

/* ------------------------------------------------------------------ JSON text */

static const char HEXDIGITS[] = "0123456789abcdef";

/* One character below 0x80 as Python's json writes it with ensure_ascii off. */
static inline char *
put_ascii(char *o, uint8_t c)
{
    if (c >= ' ' && c != '"' && c != '\\') {
        *o++ = (char)c;
        return o;
    }
    *o++ = '\\';
    switch (c) {
    case '"': *o++ = '"'; break;
    case '\\': *o++ = '\\'; break;
    case '\b': *o++ = 'b'; break;
    case '\f': *o++ = 'f'; break;
    case '\n': *o++ = 'n'; break;
    case '\r': *o++ = 'r'; break;
    case '\t': *o++ = 't'; break;
    default:
        *o++ = 'u'; *o++ = '0'; *o++ = '0';
        *o++ = HEXDIGITS[c >> 4]; *o++ = HEXDIGITS[c & 15];
    }
    return o;
}

/* A JSON string of valid UTF-8 (non-ASCII as it is) or (latin1) of bytes read as Latin-1, the
 * one-character-per-byte text of Avro's JSON encoding. */
static int
put_string(Buf *b, const uint8_t *s, Py_ssize_t n, int latin1)
{
    if (buf_reserve(b, 6 * n + 2) < 0)
        return -1;
    char *o = b->p + b->len;
    *o++ = '"';
    for (Py_ssize_t i = 0; i < n; i++) {
        uint8_t c = s[i];
        if (c < 0x80)
            o = put_ascii(o, c);
        else if (latin1) {
            *o++ = (char)(0xC0 | (c >> 6));
            *o++ = (char)(0x80 | (c & 0x3F));
        } else
            *o++ = (char)c;
    }
    *o++ = '"';
    b->len = o - b->p;
    return 0;
}

static int
put_long(Buf *b, int64_t v)
{
    char tmp[24];
    int n = snprintf(tmp, sizeof tmp, "%lld", (long long)v);
    return buf_put(b, tmp, n);
}

/* A float as Python's json writes it: repr, and NaN and infinities as wire.avro_json's strings. */
static int
put_double(Buf *b, double d)
{
    if (isnan(d))
        return buf_put(b, "\"NaN\"", 5);
    if (isinf(d))
        return d > 0 ? buf_put(b, "\"Infinity\"", 10) : buf_put(b, "\"-Infinity\"", 11);
    char *s = PyOS_double_to_string(d, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
    if (s == NULL)
        return -1;
    int rc = buf_put(b, s, (Py_ssize_t)strlen(s));
    PyMem_Free(s);
    return rc;
}

/* The proleptic Gregorian date of a day from 1970-01-01 (H. Hinnant's civil_from_days). */
static void
civil(int64_t z, int *y, unsigned *m, unsigned *d)
{
    z += 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    unsigned doe = (unsigned)(z - era * 146097);
    unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    unsigned mp = (5 * doy + 2) / 153;
    *d = doy - (153 * mp + 2) / 5 + 1;
    *m = mp < 10 ? mp + 3 : mp - 9;
    *y = (int)((int64_t)yoe + era * 400 + (*m <= 2));
}

/* A date or timestamp (read_time's) as isoformat() writes fastavro's date or datetime, as a JSON string. */
static int
put_time(Buf *b, int kind, int64_t t)
{
    char tmp[48];
    int y, n;
    unsigned m, d;
    if (kind == K_DATE) {
        civil(t, &y, &m, &d);
        n = snprintf(tmp, sizeof tmp, "\"%04d-%02u-%02u\"", y, m, d);
        return buf_put(b, tmp, n);
    }
    int64_t day = t >= 0 ? t / US_PER_DAY : -((-t + US_PER_DAY - 1) / US_PER_DAY), us = t - day * US_PER_DAY;
    civil(day, &y, &m, &d);
    n = snprintf(tmp, sizeof tmp, "\"%04d-%02u-%02uT%02d:%02d:%02d", y, m, d, (int)(us / 3600000000LL),
                 (int)(us / 60000000 % 60), (int)(us / 1000000 % 60));
    if (us % 1000000)
        n += snprintf(tmp + n, sizeof tmp - (size_t)n, ".%06d", (int)(us % 1000000));
    n += snprintf(tmp + n, sizeof tmp - (size_t)n, "%s\"",
                  kind == K_TS_MILLIS || kind == K_TS_MICROS ? "+00:00" : "");
    return buf_put(b, tmp, n);
}

#define PUT(lit) (buf_put(out, (lit), (Py_ssize_t)sizeof(lit) - 1) < 0 ? -1 : 1)
#define TRY(expr) do { int rc_ = (expr); if (rc_ <= 0) return rc_; } while (0)

/* The value at in->p as JSON: 1 written, 0 handed back, -1 a Python error. */
static int
json_value(const Program *pg, Py_ssize_t at, In *in, Buf *out, int depth)
{
    const Node *node = &pg->nodes[at];
    int64_t v, n;
    if (depth > MAX_DEPTH)
        return 0;
    switch (node->kind) {
    case K_NULL:
        return PUT("null");
    case K_BOOLEAN:
        if (in->p >= in->end)
            return 0;
        return *in->p++ ? PUT("true") : PUT("false");
    case K_INT:
    case K_LONG:
        if (read_varlong(&in->p, in->end, &v) != 0)
            return 0;
        return put_long(out, v) < 0 ? -1 : 1;
    case K_FLOAT:
        if (in->end - in->p < 4)
            return 0;
        in->p += 4;
        return put_double(out, le_float(in->p - 4)) < 0 ? -1 : 1;
    case K_DOUBLE:
        if (in->end - in->p < 8)
            return 0;
        in->p += 8;
        return put_double(out, le_double(in->p - 8)) < 0 ? -1 : 1;
    case K_BYTES:
    case K_STRING:
        if (!read_length(in, &n))
            return 0;
        if (node->kind == K_STRING && !is_utf8(in->p, n))
            return 0;
        in->p += n;
        return put_string(out, in->p - n, n, node->kind == K_BYTES) < 0 ? -1 : 1;
    case K_FIXED:
        if (in->end - in->p < node->size)
            return 0;
        in->p += node->size;
        return put_string(out, in->p - node->size, node->size, 1) < 0 ? -1 : 1;
    case K_ENUM:
        if (read_varlong(&in->p, in->end, &v) != 0 || v < 0 || v >= node->size)
            return 0;
        return buf_put(out, node->text[v], node->text_len[v]) < 0 ? -1 : 1;
    case K_RECORD:
        if (node->size == 0)
            return PUT("{}");
        for (Py_ssize_t f = 0; f < node->size; f++) {
            if (buf_put(out, node->text[f], node->text_len[f]) < 0)
                return -1;
            TRY(json_value(pg, node->child[f], in, out, depth + 1));
        }
        return PUT("}");
    case K_ARRAY: {
        TRY(PUT("["));
        int64_t left = 0;
        int rc;
        for (int first = 1; (rc = next_item(in, &left)) == 1; first = 0) {
            if (!first)
                TRY(PUT(","));
            TRY(json_value(pg, node->child[0], in, out, depth + 1));
        }
        return rc == END ? PUT("]") : rc;
    }
    case K_MAP: {
        TRY(PUT("{"));
        Py_ssize_t keys_from = in->nkeys;
        int64_t left = 0;
        int rc;
        while ((rc = next_item(in, &left)) == 1) {
            const uint8_t *key;
            int64_t len;
            if ((rc = read_key(in, keys_from, &key, &len)) <= 0)
                break;
            if ((in->nkeys - keys_from > 1 && PUT(",") < 0) || put_string(out, key, len, 0) < 0 || PUT(":") < 0) {
                rc = -1;
                break;
            }
            if ((rc = json_value(pg, node->child[0], in, out, depth + 1)) != 1)
                break;
        }
        in->nkeys = keys_from;
        return rc == END ? PUT("}") : rc;
    }
    case K_UNION:
        if (read_varlong(&in->p, in->end, &v) != 0 || v < 0 || v >= node->size)
            return 0;
        return json_value(pg, node->child[v], in, out, depth + 1);
    case K_DATE:
    case K_TS_MILLIS:
    case K_TS_MICROS:
    case K_LOCAL_TS_MILLIS:
    case K_LOCAL_TS_MICROS:
        if (!read_time(node, in, &v))
            return 0;
        return put_time(out, node->kind, v) < 0 ? -1 : 1;
    case K_UUID:
        if (!read_length(in, &n) || !canonical_uuid(in->p, n))
            return 0;
        in->p += n;
        return put_string(out, in->p - n, n, 0) < 0 ? -1 : 1;
    }
    return 0;
}

/* ------------------------------------------------------------------ the column of values */

/* The values of an Arrow binary column: its validity bitmap (NULL: all valid), int32 offsets, data. */
typedef struct {
    Py_buffer validity, offsets, data;
    int has_validity;
    Py_ssize_t offset, length;
} Column;

static void
column_release(Column *c)
{
    if (c->has_validity)
        PyBuffer_Release(&c->validity);
    PyBuffer_Release(&c->offsets);
    PyBuffer_Release(&c->data);
}

static int
column_take(Column *c, PyObject *validity, PyObject *offsets, PyObject *data, Py_ssize_t offset, Py_ssize_t length)
{
    memset(c, 0, sizeof *c);
    if (PyObject_GetBuffer(offsets, &c->offsets, PyBUF_SIMPLE) < 0)
        return -1;
    if (PyObject_GetBuffer(data, &c->data, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&c->offsets);
        return -1;
    }
    if (validity != Py_None) {
        if (PyObject_GetBuffer(validity, &c->validity, PyBUF_SIMPLE) < 0) {
            PyBuffer_Release(&c->offsets);
            PyBuffer_Release(&c->data);
            return -1;
        }
        c->has_validity = 1;
    }
    c->offset = offset;
    c->length = length;
    if (offset < 0 || length < 0 || (offset + length + 1) * 4 > c->offsets.len ||
        (c->has_validity && (offset + length + 7) / 8 > c->validity.len)) {
        column_release(c);
        PyErr_SetString(PyExc_ValueError, "the column's buffers are shorter than its length");
        return -1;
    }
    const int32_t *offs = (const int32_t *)c->offsets.buf + offset;
    for (Py_ssize_t i = 0; i < length; i++)
        if (offs[i] < 0 || offs[i] > offs[i + 1] || offs[i + 1] > c->data.len) {
            column_release(c);
            PyErr_SetString(PyExc_ValueError, "the column's offsets do not fit its data");
            return -1;
        }
    return 0;
}

/* Per value: not in the wire format, decoded here, for the reference path, decoded here as Avro's null
 * (which the reference path shows as no value: fastavro's None). */
enum { S_PLAIN, S_DONE, S_REFERENCE, S_NULL };

/* Value i of the column: 1 and its schema id and payload when it is in the wire format, else 0. */
static inline int
column_wire(const Column *c, Py_ssize_t i, uint32_t *sid, const uint8_t **p, const uint8_t **end)
{
    Py_ssize_t j = c->offset + i;
    if (c->has_validity && !(((const uint8_t *)c->validity.buf)[j >> 3] >> (j & 7) & 1))
        return 0;
    const int32_t *offs = (const int32_t *)c->offsets.buf;
    const uint8_t *s = (const uint8_t *)c->data.buf + offs[j], *e = (const uint8_t *)c->data.buf + offs[j + 1];
    if (e - s < 5 || s[0] != 0)
        return 0;
    *sid = be32(s + 1);
    *p = s + 5;
    *end = e;
    return 1;
}

/*
 * avro_json(programs, validity, offsets, data, offset, length) -> (status, ids, missing, ends, text), or None
 * when the text would pass Arrow's 2 GiB
 *
 * The values of an Arrow binary column (its buffers, offset and length) decoded with `programs`, a dict
 * from schema id to avro_program (or None: that id's values go to the reference path). status: a byte
 * per value (S_PLAIN, S_DONE, S_REFERENCE, S_NULL); ids: int32 schema id per value (0 where S_PLAIN); missing:
 * the ids met that `programs` does not hold (their values S_REFERENCE); ends and text: the JSON texts of
 * the values decoded here as an Arrow string column's int32 offsets (length + 1) and data, empty
 * elsewhere.
 */
PyObject *
avro_json(PyObject *self, PyObject *args)
{
    PyObject *programs, *validity, *offsets, *data;
    Py_ssize_t offset, length;
    if (!PyArg_ParseTuple(args, "O!OOOnn", &PyDict_Type, &programs, &validity, &offsets, &data, &offset, &length))
        return NULL;
    Column col;
    if (column_take(&col, validity, offsets, data, offset, length) < 0)
        return NULL;
    PyObject *status = PyBytes_FromStringAndSize(NULL, length);
    PyObject *ids = PyBytes_FromStringAndSize(NULL, length * 4);
    PyObject *ends = PyBytes_FromStringAndSize(NULL, (length + 1) * 4);
    PyObject *missing = PyList_New(0), *result = NULL;
    Buf out = {0};
    In in = {0};
    if (status == NULL || ids == NULL || ends == NULL || missing == NULL)
        goto done;
    uint8_t *st = (uint8_t *)PyBytes_AS_STRING(status);
    int32_t *id = (int32_t *)PyBytes_AS_STRING(ids), *end32 = (int32_t *)PyBytes_AS_STRING(ends);
    uint32_t last_sid = 0;
    const Program *last = NULL;     /* the program of last_sid (a run of one id looks it up once) */
    int have_last = 0;
    end32[0] = 0;
    for (Py_ssize_t i = 0; i < length; i++) {
        uint32_t sid;
        const uint8_t *p, *e;
        st[i] = S_PLAIN;
        id[i] = 0;
        if (column_wire(&col, i, &sid, &p, &e)) {
            id[i] = (int32_t)sid;
            st[i] = S_REFERENCE;
            if (!have_last || sid != last_sid) {
                PyObject *key = PyLong_FromUnsignedLong(sid);
                if (key == NULL)
                    goto done;
                PyObject *prog = PyDict_GetItemWithError(programs, key);
                if (prog == NULL && PyErr_Occurred()) {
                    Py_DECREF(key);
                    goto done;
                }
                int known = prog != NULL, listed = known ? 1 : PySequence_Contains(missing, key);
                if (listed < 0 || (!listed && PyList_Append(missing, key) < 0)) {
                    Py_DECREF(key);
                    goto done;
                }
                Py_DECREF(key);
                last = NULL;
                if (known && prog != Py_None && (last = PyCapsule_GetPointer(prog, CAPSULE)) == NULL)
                    goto done;
                if (last != NULL && last->arrow) {
                    PyErr_SetString(PyExc_ValueError, "avro_json takes programs for JSON");
                    goto done;
                }
                last_sid = sid;
                have_last = 1;
            }
            if (last != NULL) {
                Py_ssize_t mark = out.len;
                in.p = p;
                in.end = e;
                in.nkeys = 0;
                int rc = json_value(last, 0, &in, &out, 0);
                if (rc < 0)
                    goto done;
                if (rc == 1 && in.p == in.end)
                    st[i] = out.len - mark == 4 && memcmp(out.p + mark, "null", 4) == 0 ? S_NULL : S_DONE;
                if (st[i] != S_DONE)
                    out.len = mark;
                if (out.len > MAX_OUT) {
                    result = Py_NewRef(Py_None);
                    goto done;
                }
            }
        }
        end32[i + 1] = (int32_t)out.len;
    }
    PyObject *text = buf_bytes(&out);
    if (text != NULL)
        result = Py_BuildValue("(OOOON)", status, ids, missing, ends, text);
done:
    column_release(&col);
    Py_XDECREF(status);
    Py_XDECREF(ids);
    Py_XDECREF(ends);
    Py_XDECREF(missing);
    PyMem_Free(out.p);
    PyMem_Free(in.keys);
    return result;
}

/* ------------------------------------------------------------------ Arrow columns of a struct */

/* A node's Arrow column: validity (a byte per item, packed at the end), values (fixed width; bool a
 * byte per item; binary the data), offsets (int32: binary, list, map), and a map's keys. */
typedef struct {
    Buf valid, values, offsets, key_offsets, keys;
    Py_ssize_t length, nulls;
} Builder;

static inline int
put_i32(Buf *b, int32_t v)
{
    return buf_put(b, &v, 4);
}

/* The node whose column holds `at`'s values: a union's other branch than NULL, else `at`. */
static Py_ssize_t
column_node(const Program *pg, Py_ssize_t at)
{
    const Node *node = &pg->nodes[at];
    if (node->kind == K_UNION)
        for (Py_ssize_t c = 0; c < node->size; c++)
            if (pg->nodes[node->child[c]].kind != K_NULL)
                return node->child[c];
    return at;
}

/* An item of `at`'s column: valid or null (for a null, a zero or an empty item). */
static int
build_null(const Program *pg, Builder *bs, Py_ssize_t at)
{
    at = column_node(pg, at);
    const Node *node = &pg->nodes[at];
    if (node->kind == K_UNION || node->kind == K_NULL)
        return 0;                           /* no column (the compiler makes no such program) */
    Builder *b = &bs[at];
    static const char zeros[8] = {0};
    uint8_t zero = 0;
    if (buf_put(&b->valid, &zero, 1) < 0)
        return -1;
    b->length++;
    b->nulls++;
    switch (node->kind) {
    case K_BOOLEAN:
        return buf_put(&b->values, zeros, 1);
    case K_INT:
    case K_FLOAT:
    case K_DATE:
        return buf_put(&b->values, zeros, 4);
    case K_LONG:
    case K_DOUBLE:
    case K_TS_MILLIS:
    case K_TS_MICROS:
    case K_LOCAL_TS_MILLIS:
    case K_LOCAL_TS_MICROS:
        return buf_put(&b->values, zeros, 8);
    case K_BYTES:
    case K_STRING:
    case K_FIXED:
    case K_ENUM:
    case K_UUID:
        return put_i32(&b->offsets, (int32_t)b->values.len);
    case K_ARRAY:
    case K_MAP:
        return put_i32(&b->offsets, (int32_t)bs[column_node(pg, node->child[0])].length);
    case K_RECORD:
        for (Py_ssize_t f = 0; f < node->size; f++)
            if (build_null(pg, bs, node->child[f]) < 0)
                return -1;
        return 0;
    }
    return 0;
}

static inline int
build_valid(Builder *b)
{
    uint8_t one = 1;
    b->length++;
    return buf_put(&b->valid, &one, 1);
}

/* The value at in->p into `at`'s column (bs NULL: only read, to know it can be built): 1, 0 handed
 * back (only when reading), -1 a Python error. */
static int
arrow_value(const Program *pg, Py_ssize_t at, In *in, Builder *bs, int depth)
{
    const Node *node = &pg->nodes[at];
    Builder *b = bs ? &bs[at] : NULL;
    int64_t v, n;
    if (depth > MAX_DEPTH)
        return 0;
    switch (node->kind) {
    case K_NULL:
        return 0;                           /* only a union's branch (taken there) */
    case K_BOOLEAN: {
        if (in->p >= in->end)
            return 0;
        uint8_t bit = *in->p++ != 0;
        return b == NULL ? 1 : build_valid(b) < 0 || buf_put(&b->values, &bit, 1) < 0 ? -1 : 1;
    }
    case K_INT: {
        if (read_varlong(&in->p, in->end, &v) != 0 || v < INT32_MIN || v > INT32_MAX)
            return 0;
        int32_t i32 = (int32_t)v;
        return b == NULL ? 1 : build_valid(b) < 0 || buf_put(&b->values, &i32, 4) < 0 ? -1 : 1;
    }
    case K_LONG:
        if (read_varlong(&in->p, in->end, &v) != 0)
            return 0;
        return b == NULL ? 1 : build_valid(b) < 0 || buf_put(&b->values, &v, 8) < 0 ? -1 : 1;
    case K_FLOAT:
    case K_DOUBLE: {
        Py_ssize_t w = node->kind == K_FLOAT ? 4 : 8;
        if (in->end - in->p < w)
            return 0;
        in->p += w;
        return b == NULL ? 1 : build_valid(b) < 0 || buf_put(&b->values, in->p - w, w) < 0 ? -1 : 1;
    }
    case K_DATE: {
        if (!read_time(node, in, &v))
            return 0;
        int32_t days = (int32_t)v;
        return b == NULL ? 1 : build_valid(b) < 0 || buf_put(&b->values, &days, 4) < 0 ? -1 : 1;
    }
    case K_TS_MILLIS:
    case K_TS_MICROS:
    case K_LOCAL_TS_MILLIS:
    case K_LOCAL_TS_MICROS:
        if (!read_time(node, in, &v))
            return 0;
        return b == NULL ? 1 : build_valid(b) < 0 || buf_put(&b->values, &v, 8) < 0 ? -1 : 1;
    case K_BYTES:
    case K_STRING:
    case K_FIXED:
    case K_ENUM:
    case K_UUID: {
        const uint8_t *s;
        if (node->kind == K_FIXED) {
            n = node->size;
            if (in->end - in->p < n)
                return 0;
            s = in->p;
            in->p += n;
        } else if (node->kind == K_ENUM) {
            if (read_varlong(&in->p, in->end, &v) != 0 || v < 0 || v >= node->size)
                return 0;
            s = (const uint8_t *)node->text[v];
            n = node->text_len[v];
        } else {
            if (!read_length(in, &n) || (node->kind == K_STRING && !is_utf8(in->p, n)) ||
                (node->kind == K_UUID && !canonical_uuid(in->p, n)))
                return 0;
            s = in->p;
            in->p += n;
        }
        if (b == NULL)
            return 1;
        if (build_valid(b) < 0 || buf_put(&b->values, s, n) < 0)
            return -1;
        if (b->values.len > MAX_OUT) {
            PyErr_SetString(PyExc_OverflowError, "a struct's binary column passes 2 GiB");
            return -1;
        }
        return put_i32(&b->offsets, (int32_t)b->values.len) < 0 ? -1 : 1;
    }
    case K_RECORD:
        if (b != NULL && build_valid(b) < 0)
            return -1;
        for (Py_ssize_t f = 0; f < node->size; f++)
            TRY(arrow_value(pg, node->child[f], in, bs, depth + 1));
        return 1;
    case K_ARRAY:
    case K_MAP: {
        Py_ssize_t keys_from = in->nkeys;
        Builder *ib = bs ? &bs[column_node(pg, node->child[0])] : NULL;
        int64_t left = 0;
        int rc;
        while ((rc = next_item(in, &left)) == 1) {
            if (node->kind == K_MAP) {
                const uint8_t *key;
                int64_t len;
                if ((rc = read_key(in, keys_from, &key, &len)) <= 0)
                    break;
                if (b != NULL && (buf_put(&b->keys, key, len) < 0 ||
                                  put_i32(&b->key_offsets, (int32_t)b->keys.len) < 0)) {
                    rc = -1;
                    break;
                }
            }
            if ((rc = arrow_value(pg, node->child[0], in, bs, depth + 1)) != 1)
                break;
        }
        in->nkeys = keys_from;
        if (rc != END || b == NULL)
            return rc == END ? 1 : rc;
        if (b->keys.len > MAX_OUT) {
            PyErr_SetString(PyExc_OverflowError, "a struct's map keys pass 2 GiB");
            return -1;
        }
        return build_valid(b) < 0 || put_i32(&b->offsets, (int32_t)ib->length) < 0 ? -1 : 1;
    }
    case K_UNION:
        if (read_varlong(&in->p, in->end, &v) != 0 || v < 0 || v >= node->size)
            return 0;
        if (pg->nodes[node->child[v]].kind == K_NULL)
            return bs == NULL ? 1 : build_null(pg, bs, at) < 0 ? -1 : 1;
        return arrow_value(pg, node->child[v], in, bs, depth + 1);
    }
    return 0;
}

/* A bitmap of n bits (LSB first) from a byte per item; NULL and *nulls 0 when every byte is 1 and
 * `always` is not set. */
static PyObject *
pack_bits(const Buf *bytes, Py_ssize_t n, int always)
{
    const uint8_t *s = (const uint8_t *)bytes->p;
    Py_ssize_t ones = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        ones += s[i] != 0;
    if (ones == n && !always)
        return Py_NewRef(Py_None);
    PyObject *out = PyBytes_FromStringAndSize(NULL, (n + 7) / 8);
    if (out == NULL)
        return NULL;
    uint8_t *o = (uint8_t *)PyBytes_AS_STRING(out);
    memset(o, 0, (size_t)(n + 7) / 8);
    for (Py_ssize_t i = 0; i < n; i++)
        if (s[i])
            o[i >> 3] |= (uint8_t)(1u << (i & 7));
    return out;
}

/* (length, null count, validity or None, values or None, offsets or None, key offsets or None, keys or
 * None) of a node's column; None for NULL and UNION nodes, which have none. */
static PyObject *
builder_tuple(const Node *node, Builder *b)
{
    if (node->kind == K_NULL || node->kind == K_UNION)
        return Py_NewRef(Py_None);
    PyObject *valid = pack_bits(&b->valid, b->length, 0);
    PyObject *values = node->kind == K_BOOLEAN ? pack_bits(&b->values, b->length, 1)
        : node->kind == K_RECORD || node->kind == K_ARRAY || node->kind == K_MAP ? Py_NewRef(Py_None)
        : buf_bytes(&b->values);
    int kind = node->kind, has_offsets = kind == K_BYTES || kind == K_STRING || kind == K_FIXED || kind == K_ENUM ||
        kind == K_UUID || kind == K_ARRAY || kind == K_MAP;
    PyObject *offsets = has_offsets ? buf_bytes(&b->offsets) : Py_NewRef(Py_None);
    PyObject *key_offsets = node->kind == K_MAP ? buf_bytes(&b->key_offsets) : Py_NewRef(Py_None);
    PyObject *keys = node->kind == K_MAP ? buf_bytes(&b->keys) : Py_NewRef(Py_None);
    PyObject *t = NULL;
    if (valid && values && offsets && key_offsets && keys)
        t = Py_BuildValue("(nnOOOOO)", b->length, b->nulls, valid, values, offsets, key_offsets, keys);
    Py_XDECREF(valid);
    Py_XDECREF(values);
    Py_XDECREF(offsets);
    Py_XDECREF(key_offsets);
    Py_XDECREF(keys);
    return t;
}

/*
 * avro_arrow(schema_id, program, validity, offsets, data, offset, length) -> (status, ids, columns)
 *
 * The values of an Arrow binary column decoded into the columns of an Arrow program: those of
 * `schema_id`, which reads them, decoded here (S_DONE) where they can be; other values in the wire
 * format go to the reference path (S_REFERENCE), and those and values not in it (S_PLAIN) are null
 * structs. status and ids as avro_json's; columns: a tuple per program node (builder_tuple).
 */
PyObject *
avro_arrow(PyObject *self, PyObject *args)
{
    unsigned long want;
    PyObject *prog, *validity, *offsets, *data;
    Py_ssize_t offset, length;
    if (!PyArg_ParseTuple(args, "kOOOOnn", &want, &prog, &validity, &offsets, &data, &offset, &length))
        return NULL;
    const Program *pg = PyCapsule_GetPointer(prog, CAPSULE);
    if (pg == NULL)
        return NULL;
    if (!pg->arrow) {
        PyErr_SetString(PyExc_ValueError, "avro_arrow takes a program for Arrow");
        return NULL;
    }
    Column col;
    if (column_take(&col, validity, offsets, data, offset, length) < 0)
        return NULL;
    PyObject *status = PyBytes_FromStringAndSize(NULL, length);
    PyObject *ids = PyBytes_FromStringAndSize(NULL, length * 4);
    PyObject *columns = PyTuple_New(pg->n), *result = NULL;
    Builder *bs = PyMem_Calloc((size_t)pg->n, sizeof(Builder));
    In in = {0};
    if (status == NULL || ids == NULL || columns == NULL || bs == NULL) {
        if (bs == NULL)
            PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t k = 0; k < pg->n; k++) {   /* offsets start at 0 */
        int kind = pg->nodes[k].kind;
        if (kind == K_BYTES || kind == K_STRING || kind == K_FIXED || kind == K_ENUM || kind == K_UUID ||
            kind == K_ARRAY || kind == K_MAP)
            if (put_i32(&bs[k].offsets, 0) < 0)
                goto done;
        if (kind == K_MAP && put_i32(&bs[k].key_offsets, 0) < 0)
            goto done;
    }
    uint8_t *st = (uint8_t *)PyBytes_AS_STRING(status);
    int32_t *id = (int32_t *)PyBytes_AS_STRING(ids);
    for (Py_ssize_t i = 0; i < length; i++) {
        uint32_t sid;
        const uint8_t *p, *e;
        st[i] = S_PLAIN;
        id[i] = 0;
        int rc = 0;
        if (column_wire(&col, i, &sid, &p, &e)) {
            id[i] = (int32_t)sid;
            st[i] = S_REFERENCE;
            if (sid == want) {
                in.p = p;
                in.end = e;
                in.nkeys = 0;
                rc = arrow_value(pg, 0, &in, NULL, 0);  /* read first: a value handed back leaves no trace */
                if (rc == 1 && in.p == in.end) {
                    in.p = p;
                    in.nkeys = 0;
                    if (arrow_value(pg, 0, &in, bs, 0) < 0)
                        goto done;
                    st[i] = S_DONE;
                } else
                    rc = 0;
            }
        }
        if (rc == 0 && build_null(pg, bs, 0) < 0)
            goto done;
    }
    for (Py_ssize_t k = 0; k < pg->n; k++) {
        PyObject *t = builder_tuple(&pg->nodes[k], &bs[k]);
        if (t == NULL)
            goto done;
        PyTuple_SET_ITEM(columns, k, t);
    }
    result = Py_BuildValue("(OOO)", status, ids, columns);
done:
    column_release(&col);
    Py_XDECREF(status);
    Py_XDECREF(ids);
    Py_XDECREF(columns);
    if (bs != NULL)
        for (Py_ssize_t k = 0; k < pg->n; k++) {
            PyMem_Free(bs[k].valid.p);
            PyMem_Free(bs[k].values.p);
            PyMem_Free(bs[k].offsets.p);
            PyMem_Free(bs[k].key_offsets.p);
            PyMem_Free(bs[k].keys.p);
        }
    PyMem_Free(bs);
    PyMem_Free(in.keys);
    return result;
}
