/*
 * Plain offset commits of __consumer_offsets, reduced per key (lookupd.format.internal.group_state).
 *
 * commit_runs(buffer, start, end) -> (stop, next_offset, entries)
 *
 * Walks the batches in buffer[start:end] and takes each one that is whole, v2, CRC32C-sound, not a
 * control batch, written with no producer id (-1), and whose records are all OffsetCommit records:
 * a key of type 0 or 1 whose fields (group, topic, partition) read, and a null value (a tombstone)
 * or an OffsetCommitValue of version 0-4 that reads. Their records are reduced per key, in order, to
 *
 *     (key fields bytes, offset of the last record, its value bytes or None, any value, any tombstone)
 *
 * one tuple per key in the order keys were first seen: what GroupCoordinatorState.apply_commits
 * needs to reach the state record-by-record replay reaches. Stops at the first batch it does not
 * take and returns where it starts (`end` when all were taken), the offset after the last batch
 * taken (-1 if none) and the entries. A batch is taken whole or not at all; the caller's Python
 * replay takes the batch it stopped at, and names any fault in it.
 *
 * Keys and values are copied into an arena as they are met (a compressed batch's records live in the
 * codec's scratch buffer only until the next batch); a key's table slot keeps its last value's place.
 */
#include "_decode.h"
#include "_codecs.h"

#include <stdlib.h>

typedef struct {
    uint64_t hash;
    Py_ssize_t key_at, key_len;      /* in the arena */
    Py_ssize_t value_at, value_len;  /* value_len -1: a tombstone */
    int64_t offset;
    uint8_t any_value, any_tombstone;
} Entry;

typedef struct {
    uint8_t *arena;
    Py_ssize_t arena_len, arena_cap;
    Entry *entries;
    Py_ssize_t n_entries, entries_cap;
    Py_ssize_t *slots;               /* index into entries + 1; 0 is free */
    Py_ssize_t n_slots;              /* a power of two, kept at most half full */
} Table;

typedef struct {                    /* one record of the batch being checked */
    const uint8_t *key, *value;
    Py_ssize_t key_len, value_len;
    int64_t offset;
} Commit;

static int
arena_put(Table *t, const uint8_t *p, Py_ssize_t n, Py_ssize_t *at)
{
    if (t->arena_len + n > t->arena_cap) {
        Py_ssize_t cap = t->arena_cap ? t->arena_cap * 2 : 1 << 16;
        while (cap < t->arena_len + n)
            cap *= 2;
        uint8_t *a = realloc(t->arena, (size_t)cap);
        if (a == NULL)
            return -1;
        t->arena = a;
        t->arena_cap = cap;
    }
    memcpy(t->arena + t->arena_len, p, (size_t)n);
    *at = t->arena_len;
    t->arena_len += n;
    return 0;
}

static uint64_t
hash_bytes(const uint8_t *p, Py_ssize_t n)
{
    uint64_t h = 1469598103934665603ULL;   /* FNV-1a */
    for (Py_ssize_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ULL;
    return h ^ (h >> 29);
}

static int
table_grow(Table *t)
{
    Py_ssize_t n = t->n_slots ? t->n_slots * 2 : 1024;
    Py_ssize_t *slots = calloc((size_t)n, sizeof *slots);
    if (slots == NULL)
        return -1;
    for (Py_ssize_t i = 0; i < t->n_entries; i++) {
        Py_ssize_t s = (Py_ssize_t)(t->entries[i].hash & (uint64_t)(n - 1));
        while (slots[s])
            s = (s + 1) & (n - 1);
        slots[s] = i + 1;
    }
    free(t->slots);
    t->slots = slots;
    t->n_slots = n;
    return 0;
}

/* Record one commit of key k (its fields) with value v (NULL: a tombstone). */
static int
table_put(Table *t, const Commit *c)
{
    if ((t->n_entries + 1) * 2 > t->n_slots && table_grow(t) < 0)
        return -1;
    uint64_t h = hash_bytes(c->key, c->key_len);
    Py_ssize_t s = (Py_ssize_t)(h & (uint64_t)(t->n_slots - 1));
    Entry *e = NULL;
    while (t->slots[s]) {
        Entry *x = &t->entries[t->slots[s] - 1];
        if (x->hash == h && x->key_len == c->key_len && memcmp(t->arena + x->key_at, c->key, (size_t)c->key_len) == 0) {
            e = x;
            break;
        }
        s = (s + 1) & (t->n_slots - 1);
    }
    if (e == NULL) {
        if (t->n_entries == t->entries_cap) {
            Py_ssize_t cap = t->entries_cap ? t->entries_cap * 2 : 256;
            Entry *es = realloc(t->entries, (size_t)cap * sizeof *es);
            if (es == NULL)
                return -1;
            t->entries = es;
            t->entries_cap = cap;
        }
        e = &t->entries[t->n_entries++];
        memset(e, 0, sizeof *e);
        e->hash = h;
        if (arena_put(t, c->key, c->key_len, &e->key_at) < 0)
            return -1;
        e->key_len = c->key_len;
        t->slots[s] = t->n_entries;
    }
    e->offset = c->offset;
    if (c->value == NULL) {
        e->value_len = -1;
        e->any_tombstone = 1;
    } else {
        if (c->value_len <= e->value_len) {  /* fits where the last value was */
            memcpy(t->arena + e->value_at, c->value, (size_t)c->value_len);
        } else if (arena_put(t, c->value, c->value_len, &e->value_at) < 0) {
            return -1;
        }
        e->value_len = c->value_len;
        e->any_value = 1;
    }
    return 0;
}

/* ------------------------------------------------------------------ the OffsetCommit key and value */

static int
take(const uint8_t **p, const uint8_t *end, Py_ssize_t n)
{
    if (n < 0 || end - *p < n)
        return -1;
    *p += n;
    return 0;
}

/* A non-nullable int16-length string. */
static int
string16(const uint8_t **p, const uint8_t *end)
{
    if (end - *p < 2)
        return -1;
    int16_t n = (int16_t)be16(*p);
    *p += 2;
    return n < 0 ? -1 : take(p, end, n);
}

/* Kafka's readUnsignedVarint, as the Java int it returns (lookupd.format.internal.schema.uvarint). */
static int
uvarint(const uint8_t **pp, const uint8_t *end, int32_t *out)
{
    const uint8_t *p = *pp;
    uint32_t v = 0;
    for (int shift = 0; shift < 35; shift += 7) {
        if (p >= end)
            return -1;
        uint8_t b = *p++;
        v |= (uint32_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            *out = (int32_t)v;
            *pp = p;
            return 0;
        }
    }
    return -1;
}

/* The length of the key's fields (after its int16 record type), or -1 when it is not an OffsetCommit key
 * that reads. Bytes after the partition are ignored, as GroupCoordinatorRecordSerde ignores them. */
static Py_ssize_t
commit_key(const uint8_t *k, Py_ssize_t n)
{
    if (n < 2)
        return -1;
    int16_t type = (int16_t)be16(k);
    if (type != 0 && type != 1)
        return -1;
    const uint8_t *p = k + 2, *end = k + n;
    if (string16(&p, end) < 0 || string16(&p, end) < 0 || take(&p, end, 4) < 0)
        return -1;
    return (p - k) - 2;
}

/* Whether value[0:n] is an OffsetCommitValue of a version this decoder knows that reads. */
static int
commit_value(const uint8_t *v, Py_ssize_t n)
{
    if (n < 2)
        return 0;
    int16_t version = (int16_t)be16(v);
    const uint8_t *p = v + 2, *end = v + n;
    if (version < 0 || version > 4)
        return 0;
    if (take(&p, end, 8) < 0)                                    /* offset */
        return 0;
    if (version >= 3 && take(&p, end, 4) < 0)                    /* leaderEpoch */
        return 0;
    if (version < 4) {
        if (string16(&p, end) < 0)                               /* metadata */
            return 0;
    } else {
        int32_t len;
        if (uvarint(&p, end, &len) < 0 || len - 1 < 0 || len - 1 > 0x7FFF || take(&p, end, len - 1) < 0)
            return 0;
    }
    if (take(&p, end, version == 1 ? 16 : 8) < 0)                /* commitTimestamp (, expireTimestamp) */
        return 0;
    if (version >= 4) {                                          /* tagged fields: none known */
        int32_t count, tag, size;
        if (uvarint(&p, end, &count) < 0)
            return 0;
        for (int32_t i = 0; i < count; i++)
            if (uvarint(&p, end, &tag) < 0 || uvarint(&p, end, &size) < 0 || take(&p, end, size) < 0)
                return 0;
    }
    return 1;
}

/* The `count` records of data[0:n] into `out` when every one is an OffsetCommit that reads; 0 otherwise. */
static int
batch_commits(const uint8_t *data, Py_ssize_t n, int64_t count, int64_t base_offset, Commit *out)
{
    const uint8_t *p = data, *end = data + n;
    for (int64_t i = 0; i < count; i++) {
        int64_t length, ts_delta, offset_delta, key_len, value_len, headers, hl;
        if (read_varint(&p, end, &length) < 0 || length < 0 || end - p < length)
            return 0;
        const uint8_t *rec_end = p + length;
        if (rec_end - p < 1)
            return 0;
        p++;                                                     /* attributes */
        if (read_varlong(&p, rec_end, &ts_delta) < 0 || read_varint(&p, rec_end, &offset_delta) < 0 ||
            read_varint(&p, rec_end, &key_len) < 0 || key_len < 0 || rec_end - p < key_len)
            return 0;
        const uint8_t *key = p;
        p += key_len;
        if (read_varint(&p, rec_end, &value_len) < 0 || (value_len >= 0 && rec_end - p < value_len))
            return 0;
        const uint8_t *value = value_len >= 0 ? p : NULL;
        if (value_len > 0)
            p += value_len;
        if (read_varint(&p, rec_end, &headers) < 0 || headers < 0)
            return 0;
        for (int64_t h = 0; h < headers; h++) {
            if (read_varint(&p, rec_end, &hl) < 0 || hl < 0 || rec_end - p < hl)
                return 0;
            p += hl;
            if (read_varint(&p, rec_end, &hl) < 0 || (hl >= 0 && rec_end - p < hl))
                return 0;
            if (hl > 0)
                p += hl;
        }
        if (p != rec_end)
            return 0;
        Py_ssize_t fields = commit_key(key, (Py_ssize_t)key_len);
        if (fields < 0 || (value != NULL && !commit_value(value, (Py_ssize_t)value_len)))
            return 0;
        if (__builtin_add_overflow(base_offset, offset_delta, &out[i].offset))
            return 0;
        out[i].key = key + 2;
        out[i].key_len = fields;
        out[i].value = value;
        out[i].value_len = value_len;
    }
    return p == end;
}

static PyObject *
entries_list(const Table *t)
{
    PyObject *list = PyList_New(t->n_entries);
    if (list == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < t->n_entries; i++) {
        const Entry *e = &t->entries[i];
        PyObject *value;
        if (e->value_len < 0) {
            value = Py_NewRef(Py_None);
        } else {
            value = PyBytes_FromStringAndSize((const char *)t->arena + e->value_at, e->value_len);
        }
        PyObject *item = value == NULL ? NULL :
            Py_BuildValue("(y#LNOO)", (const char *)t->arena + e->key_at, e->key_len, (long long)e->offset, value,
                          e->any_value ? Py_True : Py_False, e->any_tombstone ? Py_True : Py_False);
        if (item == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, item);
    }
    return list;
}

PyObject *
commit_runs(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t start, stop;
    if (!PyArg_ParseTuple(args, "y*nn", &view, &start, &stop))
        return NULL;
    if (start < 0 || stop > view.len || start > stop) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "start and end must lie within the buffer");
        return NULL;
    }
    const uint8_t *buf = (const uint8_t *)view.buf;
    Table t = {0};
    Commit *commits = NULL;
    Py_ssize_t commits_cap = 0;
    Py_ssize_t pos = start;
    int64_t next_offset = -1;
    int err = 0;
    while (stop - pos >= V2_HEADER) {
        const uint8_t *b = buf + pos;
        int64_t length = (int32_t)be32(b + LENGTH_AT);
        Py_ssize_t size = (Py_ssize_t)length + LOG_OVERHEAD;
        if (length < V2_HEADER - LOG_OVERHEAD || size > stop - pos || b[MAGIC_AT] != 2)
            break;
        uint16_t attrs = be16(b + ATTRIBUTES_AT);
        int64_t count = (int32_t)be32(b + RECORD_COUNT_AT), last_offset;
        int64_t base_offset = (int64_t)be64(b + BASE_OFFSET_AT);
        if ((attrs & ATTR_CONTROL) || (int64_t)be64(b + PRODUCER_ID_AT) != -1 || count < 0 ||
            __builtin_add_overflow(base_offset, (int64_t)(int32_t)be32(b + LAST_OFFSET_DELTA_AT), &last_offset) ||
            crc32c_of(b + CRC_START, (size_t)(size - CRC_START)) != be32(b + CRC_AT))
            break;
        if (count > 0) {
            const uint8_t *records = b + V2_HEADER;
            Py_ssize_t records_len = size - V2_HEADER;
            if (attrs & ATTR_CODEC) {
                uint8_t *out;
                records_len = codecs_decompress(attrs & ATTR_CODEC, records, (size_t)records_len, MAX_DECOMPRESSED, &out);
                if (records_len < 0)
                    break;
                records = out;
            }
            if (count > records_len)   /* every record takes at least a byte */
                break;
            if (count > commits_cap) {
                Commit *c = realloc(commits, (size_t)count * sizeof *c);
                if (c == NULL) {
                    PyErr_NoMemory();
                    err = 1;
                    break;
                }
                commits = c;
                commits_cap = count;
            }
            if (!batch_commits(records, records_len, count, base_offset, commits))
                break;
            for (int64_t i = 0; i < count; i++) {
                if (table_put(&t, &commits[i]) < 0) {
                    PyErr_NoMemory();
                    err = 1;
                    break;
                }
            }
            if (err)
                break;
        }
        next_offset = last_offset + 1;
        pos += size;
    }
    PyBuffer_Release(&view);
    PyObject *entries = err ? NULL : entries_list(&t);
    free(commits);
    free(t.arena);
    free(t.entries);
    free(t.slots);
    if (entries == NULL)
        return NULL;
    return Py_BuildValue("(nLN)", pos, (long long)next_offset, entries);
}
