/* JSON lines from decoded columns: the records of lookupd.format.render, written in C. */
#include "_decode.h"

/*
 * The JSON of `lookupd.format.render.record_json` as Python's json module writes it with
 * separators (",", ":") and ensure_ascii: strings escape '"', '\\', \b \f \n \r \t by name and
 * every other character outside ' '..'~' as \uXXXX (lowercase hex, surrogate pairs above
 * U+FFFF). A key, value or header value is such a string when it is valid UTF-8 (Python's
 * strict decoder: no overlong forms, no surrogates, nothing above U+10FFFF), else
 * {"base64":"..."} in the standard alphabet with padding, and null when absent.
 */

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

/* Whether any of the n decoded records has a key or value that may be in Confluent's wire format: five
 * bytes or more starting with byte 0 (the magic). Those are shown decoded when schemas are known. */
static int
holds_wire(const Out *o, Py_ssize_t n)
{
    static const int cols[2][3] = {{C_KEY_VALID, C_KEY_END, C_KEY_DATA}, {C_VALUE_VALID, C_VALUE_END, C_VALUE_DATA}};
    for (int c = 0; c < 2; c++) {
        const uint8_t *valid = (const uint8_t *)o->at[cols[c][0]], *data = (const uint8_t *)o->at[cols[c][2]];
        const int32_t *ends = (const int32_t *)o->at[cols[c][1]];
        for (Py_ssize_t i = 0; i < n; i++)
            if (valid[i] && ends[i + 1] - ends[i] >= 5 && data[ends[i]] == 0)
                return 1;
    }
    return 0;
}

/*
 * render_batch(records, count, base_offset, base_timestamp, fixed_timestamp, has_fixed, head, mid, tail, key)
 *   -> (lines, offsets, starts) or None
 *
 * Decodes one v2 batch's record section (as decode_v2) into columns of its own and renders each
 * record (each whose key is `key`, unless key is None) as a JSON line with render_rows: `lines`
 * is the bytes, `offsets` the records' offsets and `starts` each line's start and then the end
 * (int64 each), and whether a key or value may be in Confluent's wire format (holds_wire). None when the decoder hands the batch back: the caller renders it the reference way.
 */
PyObject *
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
    if (columns_reserve(&o, records.len, 1) < 0)
        goto done;
    int decoded = decode_records(&o, (const uint8_t *)records.buf, records.len, count, base_offset, base_ts, fixed_ts,
                                 has_fixed, 1);
    columns_finish(&o);
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
    result = Py_BuildValue("(OOOO)", lines, offsets, starts, holds_wire(&o, n) ? Py_True : Py_False);
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
