/*
 * The committed offsets of a __consumer_offsets partition, kept in C, and the plain offset commits of its
 * batches applied to them in C (lookupd.format.internal.group_state).
 *
 * CommitTable: key fields (an OffsetCommit key after its record type: group, topic, partition, both
 * strings valid UTF-8) -> (offset of the commit record, its value bytes), each group's keys, and the
 * simple groups (those a commit made, not removed since). A key is kept as its (group, topic), hashed
 * once, and an index into that (group, topic)'s array of partitions (see MIN_PARTS; a sparse, negative or
 * huge partition, or other bytes a caller puts, by its whole key in a table of its own). Names and values
 * live in arenas; a value is written over the last one of its key when it fits, and the table is rebuilt
 * when more than half of the arena is dead or more keys were removed than are present. Methods: get(fields) ->
 * (record offset, value) | None, offset_of(fields) -> record offset | -1, put(fields, record offset,
 * value), remove(fields) -> whether it was there, group(name bytes) -> [(fields, record offset)] of the
 * group's keys, add_simple_group(name), discard_simple_group(name), has_simple_group(name),
 * simple_groups() -> [name bytes], reserve(bytes of log to come), len().
 *
 * commit_runs(buffer, start, end, table, note_tombstones) -> (stop, next_offset, tombstoned, removed,
 *                                                             transactional, marker)
 *
 * Walks the batches in buffer[start:end] and takes each one that is whole, v2, CRC32C-sound, not a
 * control batch, written with no producer id (-1), and whose records are all OffsetCommit records (a key
 * of type 0 or 1 whose fields read, and a null value (a tombstone) or an OffsetCommitValue of version 0-4
 * that reads, with group and topic valid UTF-8) or GroupMetadata tombstones (a key of type 2 whose group
 * is valid UTF-8), as DeleteGroups writes them with the group's offset tombstones; the others are the
 * Python replay's, which makes them so. Their records are applied to `table` in order: a value sets its
 * key and makes its group a simple group, an offset tombstone removes its key, a group tombstone its
 * simple group; and it answers what GroupCoordinatorState.apply_commits needs besides:
 *
 *     tombstoned  [key fields] with a tombstone (each once), when note_tombstones (else None)
 *     removed     [group name bytes] with a group tombstone (each once)
 *
 * A batch of offset commits written with a producer id (a transactional commit) ends the walk: it is
 * checked the same way and answered, unapplied, as `transactional`, (producer id, [(key fields, record
 * offset, value bytes or None)]), for the caller's pending offsets (None when the walk ended otherwise).
 * So does a control batch that is one COMMIT or ABORT marker that reads (uncompressed, CRC32C-sound): it is
 * answered as `marker`, (producer id, whether it commits), for the caller to replay (None otherwise);
 * any other control batch is the Python replay's.
 *
 * Stops at the first batch it does not take and returns where it starts (`end` when all were taken)
 * and the offset after the last batch taken (-1 if none). A batch is taken whole or not at all (its
 * records are all checked before any is applied); the caller's Python replay takes the batch it
 * stopped at, and names any fault in it. Every read is bounded by the buffer, the batch and the record.
 */
#include "_decode.h"
#include "_codecs.h"

#include <stdlib.h>
#include <sys/mman.h>

/* ------------------------------------------------------------------ a hash table's layout */

/* 40 bytes: what a compacted log's replay writes for nearly every record, with the key and value bytes. */
typedef struct {
    int64_t offset;                     /* of the commit record (in a table of groups: its first key, index + 1) */
    uint64_t key_at, value_at;          /* in the arena */
    uint32_t key_len;
    int32_t value_len;                  /* -1: absent (removed, or never had a value); in a table of groups,
                                         * 0: a commit made the group (a simple group), -1: not (any more) */
    int32_t value_cap;                  /* bytes at value_at this entry may write over */
    uint32_t group_next;                /* the next key of its group, index + 1; 0: none */
} Entry;

typedef struct {
    uint8_t *arena;
    Py_ssize_t arena_len, arena_cap, dead;  /* dead: arena bytes no entry uses any more */
    Entry *entries;
    Py_ssize_t n_entries, entries_cap, live;
    uint64_t *slots;                    /* the hash's high 32 bits, then index into entries + 1; 0 is free */
    Py_ssize_t n_slots;                 /* a power of two, kept at most half full */
    int shift;                          /* 64 - log2(n_slots): a key hashed h starts its probe at HOME(h, shift) */
    Py_ssize_t expect;                  /* entries the caller expects to add yet (0: unknown): growing, the slots
                                         * go to what they need, up to MAX_GROWTH times at once */
} Table;

/* A slot holds its key's hash tag beside the entry's index, so that a probe past other keys reads the
 * slot array only (one cache line), not their entries. A probe starts at HOME: a window of 8 slots (a
 * cache line) chosen by the hash's top bits, and the slot in it chosen by the hash's bits 32-34; the tag
 * holds both, so a larger table is built from the slots alone, in their order (each lands at about twice
 * its place), without reading an entry. */
#define HOME(h, shift) ((Py_ssize_t)((((h) >> ((shift) + 3)) << 3) | (((h) >> 32) & 7)))
#define SLOT(h, index) (((h) & 0xFFFFFFFF00000000ULL) | (uint64_t)(index))
#define SLOT_INDEX(slot) ((Py_ssize_t)((slot) & 0xFFFFFFFFULL))
#define SLOT_TAG(slot) ((slot) & 0xFFFFFFFF00000000ULL)
#define MAX_ENTRIES 0x7FFFFFFFL             /* an index fits the slot's low 32 bits, log2(n_slots) its tag */
#define MIN_SLOTS_LOG2 10
/* Growing the slots as a compacted log's replay fills them (nearly a key a record) cost more than the
 * probes: each doubling reads the old array and writes a new one, a megabyte or more. Told what is still
 * to come (Table.expect), a table grows to it at once, but at most 8 times over, so that a projection
 * that does not come true (new keys that stop coming) leaves at most 8 times the slots needed. */
#define MAX_GROWTH_LOG2 3
#define MAX_KEY_LEN 0x7FFFFFFFL             /* (a key's fields are at most 65542 bytes; a Python caller's bytes may be more) */
#define MAX_KEY_FIELDS (2 + 32767 + 2 + 32767 + 4)  /* OffsetCommit key fields: two int16-length strings, a partition */

/* ------------------------------------------------------------------ memory

 * A table's arrays (arena, entries, slots) of at least MAPPED bytes are mapped, not malloc'd: they grow
 * with mremap, which moves pages rather than copying them, from at least HUGE bytes on they ask for huge
 * pages (MADV_HUGEPAGE, where the kernel gives them for the asking), and a replay reserves room for what
 * a segment's bytes may add (CommitTable.reserve: address space, which costs nothing until a page is
 * written, and then a fault each 2 MiB instead of each 4 KiB). A compacted log's replay writes ~100 bytes
 * of new table a record: faulting that in 4 KiB at a time, and copying it at each doubling, cost more
 * than the scan. Smaller arrays (most partitions' tables, a call's notes) stay with malloc. */
#define MAPPED ((size_t)1 << 18)
#define HUGE ((size_t)1 << 21)
#define MAX_RESERVED ((size_t)1 << 32)      /* bytes of address space a reservation takes at most, per array */

static void *
mapped(void *p, size_t n)
{
    if (p == MAP_FAILED)
        return NULL;
#ifdef MADV_HUGEPAGE
    if (n >= HUGE)
        madvise(p, n, MADV_HUGEPAGE);   /* (advice: refused or unknown, the pages are small ones) */
#endif
    return p;
}

/* Spare regions: an arena's or entries' mapped array a table freed, kept (up to SPARE_REGIONS of them,
 * SPARE_BYTES of written pages in all) for the next table's arena or entries, which need no zeroed memory.
 * A compacted log's replay writes ~100 bytes of new table a record, and the kernel zeroing fresh pages
 * for it was a fifth of the C scan; a table made after another one freed (the next partition's replay,
 * a rebuilt table, a replay run again) writes over the pages already there instead. The pages past what
 * the freed table wrote are given back first (MADV_DONTNEED), so a spare holds no more than its table
 * used. Kept and taken under the GIL (no call here releases it). */
#define SPARE_REGIONS 6
#define SPARE_BYTES ((size_t)128 << 20)

enum { ARENA, ENTRIES, PARTS };             /* what a region holds: a spare goes to the same again first */

typedef struct {
    void *p;                            /* NULL: none */
    size_t cap, used;                   /* mapped bytes; bytes written (pages of them held) */
    int kind;
} Spare;

static Spare spares[SPARE_REGIONS];
static size_t spare_bytes;              /* the spares' `used`, summed */

static size_t
round_huge(size_t n)
{
    return (n + HUGE - 1) & ~(HUGE - 1);
}

/* A mapped region of n bytes to hold `kind`, a spare one (its bytes as its table left them) if there is
 * one: of the same kind first, the one that wrote most. */
static void *
region_new(size_t n, int kind)
{
    int best = -1;
    for (int i = 0; i < SPARE_REGIONS; i++)
        if (spares[i].p != NULL &&
            (best < 0 || (spares[i].kind == kind) > (spares[best].kind == kind) ||
             ((spares[i].kind == kind) == (spares[best].kind == kind) && spares[i].used > spares[best].used)))
            best = i;
    if (best >= 0) {
        Spare s = spares[best];
        spares[best].p = NULL;
        spare_bytes -= s.used;
        void *q = s.cap == n ? s.p : mremap(s.p, s.cap, n, MREMAP_MAYMOVE);
        if (q != MAP_FAILED)
            return mapped(q, n);
        munmap(s.p, s.cap);
    }
    return mapped(mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0), n);
}

/* p[0:old] grown (or made, p NULL) to n bytes, as realloc: not zeroed. NULL on no memory (p kept). */
static void *
region_resize(void *p, size_t old, size_t n, int kind)
{
    if (n < MAPPED)
        return realloc(p, n);
    if (old >= MAPPED)
        return mapped(mremap(p, old, n, MREMAP_MAYMOVE), n);
    void *q = region_new(n, kind);
    if (q != NULL) {
        if (old)
            memcpy(q, p, old);
        free(p);
    }
    return q;
}

/* n zero bytes. */
static void *
region_zeroed(size_t n)
{
    if (n < MAPPED)
        return calloc(n, 1);
    uint8_t *p = mapped(mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0), n);
    /* The slots are read (probed) before they are written: a page first read is the shared zero page, and
     * its first write a second fault that copies it. Written first, each page faults once. */
    for (size_t i = 0; p != NULL && i < n; i += 4096)
        p[i] = 0;
    return p;
}

static void
region_free(void *p, size_t n)
{
    if (p == NULL)
        return;
    if (n < MAPPED)
        free(p);
    else
        munmap(p, n);
}

/* Free a region of region_resize's of which `used` bytes were written: kept as a spare where there is room. */
static void
region_release(void *p, size_t n, size_t used, int kind)
{
    if (p == NULL || n < MAPPED) {
        region_free(p, n);
        return;
    }
    used = round_huge(used) < n ? round_huge(used) : n;
    for (int i = 0; i < SPARE_REGIONS; i++) {
        if (spares[i].p != NULL)
            continue;
        if (spare_bytes + used > SPARE_BYTES)
            break;
        if (used < n)
            madvise((uint8_t *)p + used, n - used, MADV_DONTNEED);
        spares[i] = (Spare){p, n, used, kind};
        spare_bytes += used;
        return;
    }
    munmap(p, n);
}

/* ------------------------------------------------------------------ a hash table over an arena */

static void
table_free(Table *t)
{
    region_release(t->arena, (size_t)t->arena_cap, (size_t)t->arena_len, ARENA);
    region_release(t->entries, (size_t)t->entries_cap * sizeof(Entry), (size_t)t->n_entries * sizeof(Entry), ENTRIES);
    region_free(t->slots, (size_t)t->n_slots * sizeof(uint64_t));
    memset(t, 0, sizeof *t);
}

/* Keys, values and names are short (tens of bytes): a call to memcmp or memcpy costs more than the work.
 * These take a word at a time, the last word overlapping the one before (no byte-wise tail). */

/* Whether a[0:n] == b[0:n]. */
static inline int
same(const uint8_t *a, const uint8_t *b, Py_ssize_t n)
{
    uint64_t x, y;
    if (n >= 8) {
        for (; n > 8; a += 8, b += 8, n -= 8) {
            memcpy(&x, a, 8);
            memcpy(&y, b, 8);
            if (x != y)
                return 0;
        }
        memcpy(&x, a + n - 8, 8);
        memcpy(&y, b + n - 8, 8);
        return x == y;
    }
    if (n >= 4) {
        uint32_t u, v, w, z;
        memcpy(&u, a, 4);
        memcpy(&v, b, 4);
        memcpy(&w, a + n - 4, 4);
        memcpy(&z, b + n - 4, 4);
        return u == v && w == z;
    }
    for (; n > 0; a++, b++, n--)
        if (*a != *b)
            return 0;
    return 1;
}

/* d[0:n] = s[0:n] (not overlapping). */
static inline void
copy(uint8_t *d, const uint8_t *s, Py_ssize_t n)
{
    uint64_t w, z;
    if (n >= 8 && n <= 32) {
        for (Py_ssize_t i = 0; i + 8 < n; i += 8) {
            memcpy(&w, s + i, 8);
            memcpy(d + i, &w, 8);
        }
        memcpy(&z, s + n - 8, 8);
        memcpy(d + n - 8, &z, 8);
    } else if (n > 32) {
        memcpy(d, s, (size_t)n);
    } else {
        for (Py_ssize_t i = 0; i < n; i++)
            d[i] = s[i];
    }
}

/* The arena grown to cap bytes; -1 on no memory (the arena as it was). */
static int
arena_resize(Table *t, Py_ssize_t cap)
{
    uint8_t *a = region_resize(t->arena, (size_t)t->arena_cap, (size_t)cap, ARENA);
    if (a == NULL)
        return -1;
    t->arena = a;
    t->arena_cap = cap;
    return 0;
}

/* Room for n more bytes in the arena (grown to twice what it needs, at least); -1 on no memory. */
static __attribute__((noinline)) int
arena_grow(Table *t, Py_ssize_t n)
{
    Py_ssize_t cap = t->arena_cap ? t->arena_cap * 2 : 1 << 16;
    while (cap < t->arena_len + n)
        cap *= 2;
    return arena_resize(t, cap);
}

/* p[0:n] appended to the arena at *at (inlined: a key or value a record, the growth aside). */
static inline __attribute__((always_inline)) int
arena_put(Table *t, const uint8_t *p, Py_ssize_t n, uint64_t *at)
{
    if (t->arena_len + n > t->arena_cap && arena_grow(t, n) < 0)
        return -1;
    copy(t->arena + t->arena_len, p, n);
    *at = (uint64_t)t->arena_len;
    t->arena_len += n;
    return 0;
}

/* Keys come from files: a seed drawn per process keeps a log written to collide from doing so here. */
static uint64_t hash_seed;

/* A word at a time, each multiplied in and folded (a key is ~40 bytes: five steps, not forty); the last
 * word is the key's last 8 bytes, overlapping the one before (no byte-wise tail). */
static uint64_t
hash_bytes(const uint8_t *p, Py_ssize_t n)
{
    uint64_t h = hash_seed ^ ((uint64_t)n * 0x9E3779B97F4A7C15ULL), w = 0;
    const uint8_t *end = p + n;
    if (n >= 8) {
        for (; end - p > 8; p += 8) {
            memcpy(&w, p, 8);
            h = (h ^ w) * 0xFF51AFD7ED558CCDULL;
            h ^= h >> 32;
        }
        memcpy(&w, end - 8, 8);
    } else {
        for (Py_ssize_t i = 0; i < n; i++)
            w |= (uint64_t)p[i] << (8 * i);
    }
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ULL;
    return h ^ (h >> 29);
}

void
offsets_seed(uint64_t seed)
{
    hash_seed = seed | 1;
}

/* Room for `entries` more entries and `bytes` more arena bytes without growing (at least doubling what
 * grows, as growing one at a time does); -1 on no memory (the table as it was). */
static int
table_reserve(Table *t, Py_ssize_t entries, Py_ssize_t bytes)
{
    Py_ssize_t cap = t->n_entries + entries;
    if (cap > MAX_ENTRIES)
        cap = MAX_ENTRIES;
    if (cap > (Py_ssize_t)(MAX_RESERVED / sizeof(Entry)))
        cap = (Py_ssize_t)(MAX_RESERVED / sizeof(Entry));
    if (cap > t->entries_cap) {
        if (cap < 2 * t->entries_cap)
            cap = 2 * t->entries_cap;
        Entry *es = region_resize(t->entries, (size_t)t->entries_cap * sizeof *es, (size_t)cap * sizeof *es, ENTRIES);
        if (es == NULL)
            return -1;
        t->entries = es;
        t->entries_cap = cap;
    }
    cap = t->arena_len + bytes;
    if (cap > (Py_ssize_t)MAX_RESERVED)
        cap = (Py_ssize_t)MAX_RESERVED;
    if (cap > t->arena_cap) {
        if (cap < 2 * t->arena_cap)
            cap = 2 * t->arena_cap;
        return arena_resize(t, cap);
    }
    return 0;
}

/* Rebuild the slots at 2^log2 of them, from the old slots in order: each lands near twice its old place,
 * so both arrays are walked about in order. */
static __attribute__((noinline)) int
table_rehash(Table *t, int log2)
{
    Py_ssize_t n = (Py_ssize_t)1 << log2;
    int shift = 64 - log2;
    uint64_t *slots = region_zeroed((size_t)n * sizeof *slots);
    if (slots == NULL)
        return -1;
    for (Py_ssize_t i = 0; i < t->n_slots; i++) {
        uint64_t slot = t->slots[i];
        if (slot == 0)
            continue;
        Py_ssize_t s = HOME(SLOT_TAG(slot), shift);
        while (slots[s])
            s = (s + 1) & (n - 1);
        slots[s] = slot;
    }
    region_free(t->slots, (size_t)t->n_slots * sizeof *slots);
    t->slots = slots;
    t->n_slots = n;
    t->shift = shift;
    return 0;
}

/* log2 of the slots a full table grows to: twice as many, or room for what it expects, up to MAX_GROWTH_LOG2
 * doublings at once (and at most 2^32 slots: MAX_ENTRIES, twice over). */
static int
table_growth(const Table *t)
{
    if (t->n_slots == 0)
        return MIN_SLOTS_LOG2;
    int now = 64 - t->shift, log2 = now + 1;
    double want = 2.0 * ((double)t->n_entries + 1 + (double)t->expect);
    while (log2 < now + MAX_GROWTH_LOG2 && log2 < 32 && (double)((Py_ssize_t)1 << log2) < want)
        log2++;
    return log2;
}

/* Twice the room for entries; -1 on no memory. */
static __attribute__((noinline)) int
entries_grow(Table *t)
{
    Py_ssize_t cap = t->entries_cap ? t->entries_cap * 2 : 256;
    Entry *es = region_resize(t->entries, (size_t)t->entries_cap * sizeof *es, (size_t)cap * sizeof *es, ENTRIES);
    if (es == NULL)
        return -1;
    t->entries = es;
    t->entries_cap = cap;
    return 0;
}

/* The entry of key k[0:n] whose hash_bytes is h, made (absent) when `create`; NULL when there is none,
 * or on no memory (*oom set). (Inlined: each call site's `create` is a constant, and the probe is the
 * scan's inner loop.) */
static inline __attribute__((always_inline)) Entry *
table_find_hashed(Table *t, const uint8_t *k, Py_ssize_t n, uint64_t h, int create, int *oom)
{
    if (n > MAX_KEY_LEN) {
        *oom = create;
        return NULL;
    }
    if (create && (t->n_entries + 1) * 2 > t->n_slots &&
        (t->n_entries >= MAX_ENTRIES || table_rehash(t, table_growth(t)) < 0)) {
        *oom = 1;
        return NULL;
    }
    if (t->n_slots == 0)
        return NULL;
    uint64_t slot;
    Py_ssize_t s = HOME(h, t->shift);
    while ((slot = t->slots[s]) != 0) {
        if (SLOT_TAG(slot) == SLOT_TAG(h)) {
            Entry *x = &t->entries[SLOT_INDEX(slot) - 1];
            if (x->key_len == n && same(t->arena + x->key_at, k, n))
                return x;
        }
        s = (s + 1) & (t->n_slots - 1);
    }
    if (!create)
        return NULL;
    if (t->n_entries == t->entries_cap && entries_grow(t) < 0) {
        *oom = 1;
        return NULL;
    }
    Entry *e = &t->entries[t->n_entries];
    if (arena_put(t, k, n, &e->key_at) < 0) {
        *oom = 1;
        return NULL;
    }
    e->offset = 0;
    e->value_at = 0;
    e->key_len = (uint32_t)n;
    e->value_len = -1;
    e->value_cap = 0;
    e->group_next = 0;
    t->slots[s] = SLOT(h, ++t->n_entries);
    return e;
}

static Entry *
table_find(Table *t, const uint8_t *k, Py_ssize_t n, int create, int *oom)
{
    return table_find_hashed(t, k, n, hash_bytes(k, n), create, oom);
}

/* Fetch the slot the probe of a key hashed h starts at into the cache ahead of its lookup. */
static inline void
table_prefetch(const Table *t, uint64_t h)
{
    if (t->n_slots)
        __builtin_prefetch(&t->slots[HOME(h, t->shift)]);
}

/* Then (the slot at hand) the entry of a key seen before whose home slot holds it (where most keys are):
 * the home slot alone is read, so that a new key's probe (a compacted log's nearly every record) is no
 * branch that waits on its cache miss here. NULL when the home slot holds another key or none. */
static inline const Entry *
table_prefetch_entry(const Table *t, uint64_t h)
{
    if (t->n_slots == 0)
        return NULL;
    uint64_t slot = t->slots[HOME(h, t->shift)];
    if (slot == 0 || SLOT_TAG(slot) != SLOT_TAG(h))
        return NULL;
    const Entry *e = &t->entries[SLOT_INDEX(slot) - 1];
    __builtin_prefetch(e);
    return e;
}

/* Set an entry's value; 1 if it was absent, 0 if not, -1 on no memory. */
static inline int
entry_set(Table *t, Entry *e, int64_t offset, const uint8_t *v, Py_ssize_t n)
{
    int was_absent = e->value_len < 0;
    if (n > INT32_MAX)
        return -1;
    if (n <= e->value_cap) {
        copy(t->arena + e->value_at, v, n);
    } else {
        uint64_t at;
        if (arena_put(t, v, n, &at) < 0)
            return -1;
        t->dead += e->value_cap;
        e->value_at = at;
        e->value_cap = (int32_t)n;
    }
    e->value_len = (int32_t)n;
    e->offset = offset;
    t->live += was_absent;
    return was_absent;
}

static int
entry_remove(Table *t, Entry *e)
{
    if (e->value_len < 0)
        return 0;
    e->value_len = -1;
    t->live--;
    return 1;
}

/* ------------------------------------------------------------------ the CommitTable type */

/* One partition's commit in its (group, topic)'s array. 24 bytes. */
typedef struct {
    int64_t offset;                     /* of the commit record */
    uint64_t value_at;                  /* in the topics' arena */
    int32_t value_len;                  /* -1: absent (removed, or never had a value) */
    int32_t value_cap;                  /* bytes at value_at this partition may write over */
} Part;

/* A (group, topic)'s partitions are an array indexed by partition, grown (to a power of two) to cover the
 * partition a commit names, so that a commit is one probe for its (group, topic) (most often the record
 * before's, not probed again) and an index, not a hash insert a partition. So that a hostile log naming
 * partition 2^31-1 (or any sparse one) does not make an array of that size, an array grows only to at
 * most PARTS_SLACK times the partitions it has had (at least MIN_PARTS): a key beyond that, and a
 * negative partition, goes to a table of its own by its whole fields (CommitTable.odd), moved into the
 * array when the array grows over it. */
#define MIN_PARTS 16
#define PARTS_SLACK 4
#define MAX_PARTS ((Py_ssize_t)1 << 30)     /* (an index into a topic's array, as int32 partitions: never reached) */

typedef struct {
    PyObject_HEAD
    Table t;                            /* (group, topic) fields (the key's fields but its partition) -> its
                                         * partitions: value_at the first of its Parts, value_cap how many,
                                         * offset how many have been made present (growth's bound), group_next
                                         * the next (group, topic) of its group */
    Part *parts;                        /* every (group, topic)'s array, one after another */
    Py_ssize_t n_parts, parts_cap, dead_parts;  /* dead: left behind by an array that grew */
    Table odd;                          /* the other keys by their whole fields (see MIN_PARTS), and any bytes a
                                         * Python caller puts that are not group, topic, partition */
    Table groups;                       /* group name -> its first (group, topic) (offset: index + 1 into t),
                                         * its first odd key (value_at: index + 1 into odd); value_len 0:
                                         * a simple group (made by a commit), -1: not */
    Py_ssize_t live;                    /* present partitions in the arrays */
    Py_ssize_t removed;                 /* partitions removed from the arrays since the last rebuild */
    Py_ssize_t last_topic;              /* the (group, topic) entry the scan's last commit was of, index + 1 */
    Py_ssize_t last_group;              /* the group entry looked up last, index + 1 (0: none) */
    Py_ssize_t reserved, scanned;       /* bytes of log told (reserve) and not yet scanned by commit_runs; bytes
                                         * it scanned: t.expect is what the keys per byte so far make of them */
} CommitTable;

/* Room for `cap` partitions in all; -1 on no memory (the arrays as they were). */
static int
parts_resize(CommitTable *self, Py_ssize_t cap)
{
    Part *ps = region_resize(self->parts, (size_t)self->parts_cap * sizeof *ps, (size_t)cap * sizeof *ps, PARTS);
    if (ps == NULL)
        return -1;
    self->parts = ps;
    self->parts_cap = cap;
    return 0;
}

static void
parts_free(CommitTable *self)
{
    region_release(self->parts, (size_t)self->parts_cap * sizeof(Part), (size_t)self->n_parts * sizeof(Part), PARTS);
    self->parts = NULL;
    self->n_parts = self->parts_cap = self->dead_parts = 0;
}

static void
ct_dealloc(CommitTable *self)
{
    table_free(&self->t);
    table_free(&self->odd);
    table_free(&self->groups);
    parts_free(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The group entry of name g[0:n], whose hash_bytes is h, (made, not simple, when `create`); NULL if none or
 * on no memory (*oom set). A run's records are mostly one group's: the last one found is tried first. */
static Entry *
ct_group_find(CommitTable *self, const uint8_t *g, Py_ssize_t n, uint64_t h, int create, int *oom)
{
    Py_ssize_t before = self->groups.n_entries;
    Entry *e = table_find_hashed(&self->groups, g, n, h, create, oom);
    if (e != NULL) {
        self->last_group = e - self->groups.entries + 1;
        if (self->groups.n_entries != before)
            e->value_at = 0;            /* (no odd key yet) */
    }
    return e;
}

static inline Entry *
ct_last_group(CommitTable *self, const uint8_t *g, Py_ssize_t n)
{
    Entry *e = self->last_group ? &self->groups.entries[self->last_group - 1] : NULL;
    return e != NULL && e->key_len == n && same(self->groups.arena + e->key_at, g, n) ? e : NULL;
}

static inline Entry *
ct_group(CommitTable *self, const uint8_t *g, Py_ssize_t n, int create, int *oom)
{
    Entry *e = ct_last_group(self, g, n);
    return e != NULL ? e : ct_group_find(self, g, n, hash_bytes(g, n), create, oom);
}

/* The length of k[0:n]'s (group, topic) when k is OffsetCommit key fields (two int16-length strings and a
 * partition, nothing after); -1 otherwise (a key for the odd table). */
static inline Py_ssize_t
fields_prefix(const uint8_t *k, Py_ssize_t n)
{
    if (n < 8)
        return -1;
    Py_ssize_t g = (int16_t)be16(k);
    if (g < 0 || 2 + g + 2 + 4 > n)
        return -1;
    Py_ssize_t t = (int16_t)be16(k + 2 + g);
    return t >= 0 && 2 + g + 2 + t + 4 == n ? n - 4 : -1;
}

/* The (group, topic) entry of prefix k[0:n] hashed h, made (no partitions, linked into its group) when
 * `create`; NULL if none or on no memory (*oom set). */
static Entry *
ct_topic(CommitTable *self, const uint8_t *k, Py_ssize_t n, uint64_t h, int create, int *oom)
{
    Py_ssize_t before = self->t.n_entries;
    Entry *e = table_find_hashed(&self->t, k, n, h, create, oom);
    if (e == NULL || self->t.n_entries == before)
        return e;
    e->value_at = 0;
    e->value_cap = 0;
    e->offset = 0;
    Entry *g = ct_group(self, k + 2, (int16_t)be16(k), 1, oom);
    if (g == NULL)
        return NULL;
    e = &self->t.entries[self->t.n_entries - 1];
    e->group_next = (uint32_t)g->offset;
    g->offset = self->t.n_entries;
    return e;
}

/* The odd key k[0:n]'s entry, made (absent, linked into its group) when `create`. */
static Entry *
ct_odd(CommitTable *self, const uint8_t *k, Py_ssize_t n, int create, int *oom)
{
    Py_ssize_t before = self->odd.n_entries;
    Entry *e = table_find(&self->odd, k, n, create, oom);
    if (e == NULL || self->odd.n_entries == before)
        return e;
    Entry *g = ct_group(self, k + 2, (int16_t)be16(k), 1, oom);
    if (g == NULL)
        return NULL;
    e->group_next = (uint32_t)g->value_at;
    g->value_at = (uint64_t)self->odd.n_entries;
    return e;
}

/* The fields of topic entry e's partition p into buf (room for e's key and 4 bytes). */
static inline Py_ssize_t
ct_fields(const CommitTable *self, const Entry *e, uint32_t p, uint8_t *buf)
{
    memcpy(buf, self->t.arena + e->key_at, e->key_len);
    buf[e->key_len] = (uint8_t)(p >> 24);
    buf[e->key_len + 1] = (uint8_t)(p >> 16);
    buf[e->key_len + 2] = (uint8_t)(p >> 8);
    buf[e->key_len + 3] = (uint8_t)p;
    return (Py_ssize_t)e->key_len + 4;
}

/* Grow topic entry ti's array to cover partition p when PARTS_SLACK allows: 1 if it does, 0 if not (the key
 * is odd), -1 on no memory. Odd keys the array now covers move into it. */
static __attribute__((noinline)) int
ct_grow_parts(CommitTable *self, Py_ssize_t ti, int64_t p)
{
    Entry *e = &self->t.entries[ti];
    Py_ssize_t cap = MIN_PARTS;
    while (cap <= p && cap < MAX_PARTS)
        cap *= 2;
    if (p < 0 || cap <= p || (cap > MIN_PARTS && cap > PARTS_SLACK * (e->offset + 1)))
        return 0;
    if (self->n_parts + cap > self->parts_cap) {
        Py_ssize_t want = self->parts_cap ? self->parts_cap * 2 : 1024;
        while (want < self->n_parts + cap)
            want *= 2;
        if (parts_resize(self, want) < 0)
            return -1;
    }
    Py_ssize_t old = e->value_cap, base = self->n_parts;
    if (old)
        memcpy(self->parts + base, self->parts + e->value_at, (size_t)old * sizeof(Part));
    for (Py_ssize_t i = old; i < cap; i++)
        self->parts[base + i] = (Part){0, 0, -1, 0};
    self->dead_parts += old;
    self->n_parts += cap;
    e->value_at = (uint64_t)base;
    e->value_cap = (int32_t)cap;
    if (self->odd.live > 0) {           /* odd keys of this (group, topic) the array now covers */
        uint8_t small[512];
        uint8_t *k = e->key_len + 4 <= sizeof small ? small : malloc((size_t)e->key_len + 4);
        if (k == NULL)
            return -1;
        for (Py_ssize_t i = old; i < cap; i++) {
            int oom = 0;
            Py_ssize_t n = ct_fields(self, e, (uint32_t)i, k);
            Entry *x = table_find(&self->odd, k, n, 0, &oom);
            if (x == NULL || x->value_len < 0)
                continue;
            Part *q = &self->parts[base + i];
            q->offset = x->offset;
            if (arena_put(&self->t, self->odd.arena + x->value_at, x->value_len, &q->value_at) < 0) {
                if (k != small)
                    free(k);
                return -1;
            }
            q->value_len = q->value_cap = x->value_len;
            entry_remove(&self->odd, x);
            self->live++;
            e->offset++;
        }
        if (k != small)
            free(k);
    }
    return 1;
}

/* Set partition q's commit; -1 on no memory. */
static inline int
part_set(CommitTable *self, Part *q, int64_t offset, const uint8_t *v, Py_ssize_t n)
{
    if (n > INT32_MAX)
        return -1;
    if (n <= q->value_cap) {
        copy(self->t.arena + q->value_at, v, n);
    } else {
        uint64_t at;
        if (arena_put(&self->t, v, n, &at) < 0)
            return -1;
        self->t.dead += q->value_cap;
        q->value_at = at;
        q->value_cap = (int32_t)n;
    }
    self->live += q->value_len < 0;
    q->value_len = (int32_t)n;
    q->offset = offset;
    return 0;
}

/* Put fields k[0:n] (prefix length pn, its hash h: see fields_prefix; pn < 0 for an odd key) -> (offset,
 * v[0:vn]); -1 on no memory. */
static int
ct_set(CommitTable *self, const uint8_t *k, Py_ssize_t n, Py_ssize_t pn, uint64_t h, int64_t offset,
       const uint8_t *v, Py_ssize_t vn)
{
    int oom = 0;
    if (pn >= 0) {
        Entry *e = ct_topic(self, k, pn, h, 1, &oom);
        if (e == NULL)
            return -1;
        int64_t p = (int32_t)be32(k + pn);
        int r = 1;
        if (p < 0 || p >= e->value_cap)
            r = ct_grow_parts(self, e - self->t.entries, p);
        if (r < 0)
            return -1;
        if (r > 0) {
            Part *q = &self->parts[e->value_at + p];
            e->offset += q->value_len < 0;
            return part_set(self, q, offset, v, vn);
        }
    }
    Entry *x = ct_odd(self, k, n, 1, &oom);
    return x == NULL ? -1 : entry_set(&self->odd, x, offset, v, vn) < 0 ? -1 : 0;
}

/* The present commit of fields k[0:n]: *part set for one in an array, *odd for an odd key; 0 if none. */
static int
ct_find_hashed(CommitTable *self, const uint8_t *k, Py_ssize_t n, Py_ssize_t pn, uint64_t h, Part **part, Entry **odd)
{
    int oom = 0;
    *part = NULL;
    *odd = NULL;
    if (pn >= 0) {
        Entry *e = table_find_hashed(&self->t, k, pn, h, 0, &oom);
        int64_t p = (int32_t)be32(k + pn);
        if (e != NULL && p >= 0 && p < e->value_cap) {
            Part *q = &self->parts[e->value_at + p];
            *part = q->value_len >= 0 ? q : NULL;
            return *part != NULL;
        }
    }
    if (self->odd.live == 0 || n > MAX_KEY_LEN)
        return 0;
    Entry *x = table_find(&self->odd, k, n, 0, &oom);
    *odd = x != NULL && x->value_len >= 0 ? x : NULL;
    return *odd != NULL;
}

static int
ct_find(CommitTable *self, const uint8_t *k, Py_ssize_t n, Part **part, Entry **odd)
{
    Py_ssize_t pn = fields_prefix(k, n);
    return ct_find_hashed(self, k, n, pn, pn < 0 ? 0 : hash_bytes(k, pn), part, odd);
}

static void
ct_remove_found(CommitTable *self, Part *q, Entry *x)
{
    if (q != NULL) {
        q->value_len = -1;
        self->live--;
        self->removed++;
    } else if (x != NULL) {
        entry_remove(&self->odd, x);
    }
}

/* Rebuild the tables with the present keys and the simple groups only (when most of what they hold is dead). */
static int
ct_maybe_compact(CommitTable *self)
{
    Py_ssize_t arena = self->t.arena_len + self->odd.arena_len;
    Py_ssize_t dead = self->t.dead + self->odd.dead;
    Py_ssize_t live = self->live + self->odd.live;
    Py_ssize_t absent = self->removed + (self->odd.n_entries - self->odd.live);
    if (!(arena > (1 << 20) && (dead > arena / 2 || absent > live)))
        return 0;
    CommitTable fresh = {0};
    uint8_t *buf = malloc(MAX_KEY_FIELDS);
    int oom = buf == NULL;
    for (Py_ssize_t i = 0; i < self->t.n_entries && !oom; i++) {
        Entry *e = &self->t.entries[i];
        for (Py_ssize_t p = 0; p < e->value_cap && !oom; p++) {
            Part *q = &self->parts[e->value_at + p];
            if (q->value_len < 0)
                continue;
            Py_ssize_t n = ct_fields(self, e, (uint32_t)p, buf);
            oom = ct_set(&fresh, buf, n, n - 4, hash_bytes(buf, n - 4), q->offset,
                         self->t.arena + q->value_at, q->value_len) < 0;
        }
    }
    for (Py_ssize_t i = 0; i < self->odd.n_entries && !oom; i++) {
        Entry *x = &self->odd.entries[i];
        if (x->value_len < 0)
            continue;
        const uint8_t *k = self->odd.arena + x->key_at;
        Py_ssize_t pn = fields_prefix(k, x->key_len);
        oom = ct_set(&fresh, k, x->key_len, pn, pn < 0 ? 0 : hash_bytes(k, pn), x->offset,
                     self->odd.arena + x->value_at, x->value_len) < 0;
    }
    free(buf);
    for (Py_ssize_t i = 0; i < self->groups.n_entries && !oom; i++) {
        Entry *g = &self->groups.entries[i];
        if (g->value_len < 0)
            continue;
        Entry *x = ct_group(&fresh, self->groups.arena + g->key_at, g->key_len, 1, &oom);
        if (x != NULL)
            x->value_len = 0;
    }
    if (oom) {
        table_free(&fresh.t);
        table_free(&fresh.odd);
        table_free(&fresh.groups);
        parts_free(&fresh);
        return -1;
    }
    table_free(&self->t);
    table_free(&self->odd);
    table_free(&self->groups);
    parts_free(self);
    self->t = fresh.t;
    self->odd = fresh.odd;
    self->groups = fresh.groups;
    self->parts = fresh.parts;
    self->n_parts = fresh.n_parts;
    self->parts_cap = fresh.parts_cap;
    self->dead_parts = fresh.dead_parts;
    self->live = fresh.live;
    self->last_group = fresh.last_group;
    self->last_topic = 0;
    self->removed = 0;
    return 0;
}

static int
ct_lookup(CommitTable *self, PyObject *key, Part **q, Entry **x)
{
    char *k;
    Py_ssize_t n;
    if (PyBytes_AsStringAndSize(key, &k, &n) < 0)
        return -1;
    return ct_find(self, (const uint8_t *)k, n, q, x);
}

static PyObject *
ct_get(CommitTable *self, PyObject *key)
{
    Part *q;
    Entry *x;
    int r = ct_lookup(self, key, &q, &x);
    if (r < 0)
        return NULL;
    if (r == 0)
        Py_RETURN_NONE;
    if (q != NULL)
        return Py_BuildValue("(Ly#)", (long long)q->offset, (const char *)self->t.arena + q->value_at,
                             (Py_ssize_t)q->value_len);
    return Py_BuildValue("(Ly#)", (long long)x->offset, (const char *)self->odd.arena + x->value_at,
                         (Py_ssize_t)x->value_len);
}

static PyObject *
ct_offset_of(CommitTable *self, PyObject *key)
{
    Part *q;
    Entry *x;
    int r = ct_lookup(self, key, &q, &x);
    if (r < 0)
        return NULL;
    return PyLong_FromLongLong(r == 0 ? -1 : q != NULL ? (long long)q->offset : (long long)x->offset);
}

static PyObject *
ct_put(CommitTable *self, PyObject *args)
{
    Py_buffer key, value;
    long long offset;
    if (!PyArg_ParseTuple(args, "y*Ly*", &key, &offset, &value))
        return NULL;
    int r = -1;
    if (key.len < 2 || (int16_t)be16(key.buf) < 0 || (int16_t)be16(key.buf) > key.len - 2) {
        PyErr_SetString(PyExc_ValueError, "fields must start with the group, an int16-length string");
    } else if (key.len > MAX_KEY_LEN || value.len > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "fields or value too long");
    } else {
        const uint8_t *k = key.buf;
        Py_ssize_t pn = fields_prefix(k, key.len);
        r = ct_set(self, k, key.len, pn, pn < 0 ? 0 : hash_bytes(k, pn), offset, value.buf, value.len);
    }
    PyBuffer_Release(&key);
    PyBuffer_Release(&value);
    if (r < 0 || ct_maybe_compact(self) < 0)
        return PyErr_Occurred() ? NULL : PyErr_NoMemory();
    Py_RETURN_NONE;
}

static PyObject *
ct_remove(CommitTable *self, PyObject *key)
{
    Part *q;
    Entry *x;
    int r = ct_lookup(self, key, &q, &x);
    if (r < 0)
        return NULL;
    ct_remove_found(self, q, x);
    return PyBool_FromLong(r);
}

/* The group entry of a Python bytes name (made when `create`); NULL with an error set, or NULL alone
 * when there is none. */
static Entry *
ct_group_of(CommitTable *self, PyObject *name, int create)
{
    char *g;
    Py_ssize_t n;
    if (PyBytes_AsStringAndSize(name, &g, &n) < 0)
        return NULL;
    int oom = 0;
    Entry *e = ct_group(self, (const uint8_t *)g, n, create, &oom);
    if (oom)
        PyErr_NoMemory();
    return e;
}

static int
append_key(PyObject *out, const uint8_t *k, Py_ssize_t n, int64_t offset)
{
    PyObject *item = Py_BuildValue("(y#L)", (const char *)k, n, (long long)offset);
    int err = item == NULL || PyList_Append(out, item) < 0;
    Py_XDECREF(item);
    return err ? -1 : 0;
}

static PyObject *
ct_group_keys(CommitTable *self, PyObject *name)
{
    Entry *head = ct_group_of(self, name, 0);
    if (head == NULL && PyErr_Occurred())
        return NULL;
    PyObject *out = PyList_New(0);
    uint8_t *buf = out == NULL || head == NULL ? NULL : malloc(MAX_KEY_FIELDS);
    if (out != NULL && head != NULL && buf == NULL) {
        Py_CLEAR(out);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = head == NULL ? 0 : (Py_ssize_t)head->offset; out != NULL && i; ) {
        Entry *e = &self->t.entries[i - 1];
        i = e->group_next;
        for (Py_ssize_t p = 0; out != NULL && p < e->value_cap; p++) {
            Part *q = &self->parts[e->value_at + p];
            if (q->value_len >= 0 && append_key(out, buf, ct_fields(self, e, (uint32_t)p, buf), q->offset) < 0)
                Py_CLEAR(out);
        }
    }
    for (Py_ssize_t i = head == NULL ? 0 : (Py_ssize_t)head->value_at; out != NULL && i; ) {
        Entry *x = &self->odd.entries[i - 1];
        i = x->group_next;
        if (x->value_len >= 0 && append_key(out, self->odd.arena + x->key_at, x->key_len, x->offset) < 0)
            Py_CLEAR(out);
    }
    free(buf);
    return out;
}

static PyObject *
ct_add_simple_group(CommitTable *self, PyObject *name)
{
    Entry *g = ct_group_of(self, name, 1);
    if (g == NULL)
        return PyErr_Occurred() ? NULL : PyErr_NoMemory();
    g->value_len = 0;
    Py_RETURN_NONE;
}

static PyObject *
ct_discard_simple_group(CommitTable *self, PyObject *name)
{
    Entry *g = ct_group_of(self, name, 0);
    if (g == NULL && PyErr_Occurred())
        return NULL;
    if (g != NULL)
        g->value_len = -1;
    Py_RETURN_NONE;
}

static PyObject *
ct_has_simple_group(CommitTable *self, PyObject *name)
{
    Entry *g = ct_group_of(self, name, 0);
    if (g == NULL && PyErr_Occurred())
        return NULL;
    return PyBool_FromLong(g != NULL && g->value_len >= 0);
}

static PyObject *
ct_simple_groups(CommitTable *self, PyObject *unused)
{
    PyObject *out = PyList_New(0);
    for (Py_ssize_t i = 0; out != NULL && i < self->groups.n_entries; i++) {
        Entry *g = &self->groups.entries[i];
        if (g->value_len < 0)
            continue;
        PyObject *name = PyBytes_FromStringAndSize((const char *)self->groups.arena + g->key_at, g->key_len);
        if (name == NULL || PyList_Append(out, name) < 0)
            Py_CLEAR(out);
        Py_XDECREF(name);
    }
    return out;
}

/* The fewest bytes a record the scan takes fills in a batch: a length, attributes, timestamp and offset
 * deltas, key length and value length of a byte each, the shortest key (10 bytes: type, two empty strings,
 * partition), a null value, no headers. */
#define MIN_RECORD_BYTES 17

static PyObject *
ct_reserve(CommitTable *self, PyObject *arg)
{
    Py_ssize_t bytes = PyNumber_AsSsize_t(arg, PyExc_OverflowError);
    if (bytes == -1 && PyErr_Occurred())
        return NULL;
    /* (a room only: where the address space is refused, as under vm.overcommit_memory=2, the table grows
     * as it fills instead) */
    if (bytes > 0 && table_reserve(&self->t, bytes / MIN_RECORD_BYTES, bytes) == 0 &&
        table_reserve(&self->groups, bytes / MIN_RECORD_BYTES, bytes) == 0) {
        Py_ssize_t want = self->n_parts + bytes / MIN_RECORD_BYTES + MIN_PARTS;
        if (want > (Py_ssize_t)(MAX_RESERVED / sizeof(Part)))
            want = (Py_ssize_t)(MAX_RESERVED / sizeof(Part));
        if (want > self->parts_cap)
            (void)parts_resize(self, want);
    }
    self->reserved = bytes > 0 ? bytes : 0;
    Py_RETURN_NONE;
}

static Py_ssize_t
ct_len(CommitTable *self)
{
    return self->live + self->odd.live;
}

static PyMethodDef ct_methods[] = {
    {"get", (PyCFunction)ct_get, METH_O, "get(fields) -> (record offset, value bytes) | None"},
    {"offset_of", (PyCFunction)ct_offset_of, METH_O, "offset_of(fields) -> the commit's record offset, -1 if none"},
    {"put", (PyCFunction)ct_put, METH_VARARGS, "put(fields, record offset, value bytes)"},
    {"remove", (PyCFunction)ct_remove, METH_O, "remove(fields) -> whether it was there"},
    {"group", (PyCFunction)ct_group_keys, METH_O, "group(name bytes) -> [(fields, record offset)] of the group's keys"},
    {"add_simple_group", (PyCFunction)ct_add_simple_group, METH_O,
     "add_simple_group(name bytes): a commit made the group (a simple group)"},
    {"discard_simple_group", (PyCFunction)ct_discard_simple_group, METH_O,
     "discard_simple_group(name bytes): the group was removed"},
    {"has_simple_group", (PyCFunction)ct_has_simple_group, METH_O,
     "has_simple_group(name bytes) -> whether a commit made the group and it was not removed since"},
    {"simple_groups", (PyCFunction)ct_simple_groups, METH_NOARGS, "simple_groups() -> [name bytes]"},
    {"reserve", (PyCFunction)ct_reserve, METH_O,
     "reserve(bytes): room for what a log's `bytes` may add, as address space (no memory until it is used; "
     "none where it is refused)"},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods ct_sequence = {.sq_length = (lenfunc)ct_len};

PyTypeObject CommitTableType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "lookupd.format._decode.CommitTable",
    .tp_doc = "Committed offsets by OffsetCommit key fields: (record offset, value bytes), and the simple groups "
              "(see _offsets.c).",
    .tp_basicsize = sizeof(CommitTable),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)ct_dealloc,
    .tp_methods = ct_methods,
    .tp_as_sequence = &ct_sequence,
};

/* ------------------------------------------------------------------ the OffsetCommit key and value */

typedef struct {                    /* one record of the batch being checked */
    const uint8_t *key, *value;     /* key: its fields (after the record type); value NULL: a tombstone */
    Py_ssize_t key_len, value_len;
    int64_t offset;
    uint64_t hash;                  /* hash_bytes of the key's (group, topic) (set when it is applied) */
    uint64_t group_hash;            /* hash_bytes of its group's name, where new_group */
    int new_group;                  /* the record before in the run is another group's */
    int same_topic;                 /* a commit, and the record before it in the run a commit of its (group,
                                     * topic) (whose apply left it as CommitTable.last_topic) */
    int same_group;                 /* a commit, and the record before it in the run a commit of its group
                                     * (whose apply left the group as CommitTable.last_group) */
    const Entry *seen;              /* (apply_all: the entry the key may have, fetched ahead) */
    int group_tombstone;            /* a GroupMetadata tombstone: key is its group (an int16-length string) */
} Commit;

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

/* Kafka's readUnsignedVarint, as the Java int it returns (lookupd.message.wire.Reader.uvarint). */
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

/* Whether s[0:n] is valid UTF-8 (Python's rules: no surrogates, no overlong forms, at most U+10FFFF).
 * Group ids and topic names are nearly always ASCII: that is checked first, a word at a time. */
static inline __attribute__((always_inline)) int
utf8(const uint8_t *s, Py_ssize_t n)
{
    uint64_t high = 0, w;           /* the high bits of every byte: none is ASCII */
    if (n >= 8) {
        for (Py_ssize_t i = 0; i + 8 < n; i += 8) {
            memcpy(&w, s + i, 8);
            high |= w;
        }
        memcpy(&w, s + n - 8, 8);
        high |= w;
    } else {
        for (Py_ssize_t i = 0; i < n; i++)
            high |= s[i];
    }
    if (!(high & 0x8080808080808080ULL))
        return 1;
    Py_ssize_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
        if (len == 0 || c > 0xF4 || i + len > n)
            return 0;
        for (int j = 1; j < len; j++)
            if ((s[i + j] & 0xC0) != 0x80)
                return 0;
        uint8_t d = s[i + 1];
        if ((c == 0xE0 && d < 0xA0) || (c == 0xED && d >= 0xA0) || (c == 0xF0 && d < 0x90) || (c == 0xF4 && d >= 0x90))
            return 0;
        i += len;
    }
    return 1;
}

/* A non-nullable int16-length string that is valid UTF-8. */
static inline __attribute__((always_inline)) int
utf8_string16(const uint8_t **p, const uint8_t *end)
{
    const uint8_t *at = *p + 2;
    return string16(p, end) < 0 || !utf8(at, *p - at) ? -1 : 0;
}

#define OFFSET_COMMIT_LEGACY 0              /* record types (the key's first int16) */
#define OFFSET_COMMIT 1
#define GROUP_METADATA 2

/* The length of the key's fields (after its int16 record type) when it is an OffsetCommit key that reads
 * with group and topic valid UTF-8 (*type set), or, with `groups`, a GroupMetadata key whose group is valid
 * UTF-8; -1 otherwise. Bytes after the fields are ignored, as GroupCoordinatorRecordSerde ignores them. */
static inline __attribute__((always_inline)) Py_ssize_t
commit_key(const uint8_t *k, Py_ssize_t n, int groups, int16_t *type)
{
    if (n < 2)
        return -1;
    *type = (int16_t)be16(k);
    const uint8_t *p = k + 2, *end = k + n;
    if (*type == GROUP_METADATA && groups)
        return utf8_string16(&p, end) < 0 ? -1 : (p - k) - 2;
    if (*type != OFFSET_COMMIT_LEGACY && *type != OFFSET_COMMIT)
        return -1;
    if (utf8_string16(&p, end) < 0 || utf8_string16(&p, end) < 0 || take(&p, end, 4) < 0)
        return -1;
    return (p - k) - 2;
}

/* Whether value[0:n] is an OffsetCommitValue of a version this decoder knows that reads (trailing bytes
 * ignored, as the serde ignores them). */
static inline __attribute__((always_inline)) int
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
    if (version >= 4) {                                          /* tagged fields: 0 is topicId, a uuid */
        int32_t count, tag, size;
        if (uvarint(&p, end, &count) < 0)
            return 0;
        for (int32_t i = 0; i < count; i++)
            if (uvarint(&p, end, &tag) < 0 || uvarint(&p, end, &size) < 0 || (tag == 0 && size != 16) ||
                take(&p, end, size) < 0)
                return 0;
    }
    return 1;
}

/* One record of a v2 batch's record section at *p, ending within `end` (its key and value, NULL when null;
 * a negative length, as in the Python decoder; its headers read and passed over): *p moved past it; -1 where
 * it does not read. */
static inline __attribute__((always_inline)) int
read_record(const uint8_t **pp, const uint8_t *end, int64_t *offset_delta, const uint8_t **key, int64_t *key_len,
            const uint8_t **value, int64_t *value_len)
{
    const uint8_t *p = *pp;
    int64_t length, ts_delta, headers, hl;
    if (read_varint(&p, end, &length) < 0 || length < 0 || end - p < length)
        return -1;
    const uint8_t *rec_end = p + length;
    if (rec_end - p < 1)
        return -1;
    p++;                                                         /* attributes */
    if (read_varlong(&p, rec_end, &ts_delta) < 0 || read_varint(&p, rec_end, offset_delta) < 0 ||
        read_varint(&p, rec_end, key_len) < 0 || (*key_len >= 0 && rec_end - p < *key_len))
        return -1;
    *key = *key_len >= 0 ? p : NULL;
    if (*key_len > 0)
        p += *key_len;
    if (read_varint(&p, rec_end, value_len) < 0 || (*value_len >= 0 && rec_end - p < *value_len))
        return -1;
    *value = *value_len >= 0 ? p : NULL;
    if (*value_len > 0)
        p += *value_len;
    if (read_varint(&p, rec_end, &headers) < 0 || headers < 0)
        return -1;
    for (int64_t h = 0; h < headers; h++) {
        if (read_varint(&p, rec_end, &hl) < 0 || hl < 0 || rec_end - p < hl)
            return -1;
        p += hl;
        if (read_varint(&p, rec_end, &hl) < 0 || (hl >= 0 && rec_end - p < hl))
            return -1;
        if (hl > 0)
            p += hl;
    }
    if (p != rec_end)
        return -1;
    *pp = p;
    return 0;
}

/* The `count` records of data[0:n] into `out` when every one is an OffsetCommit that reads or, with
 * `groups`, a GroupMetadata tombstone whose key reads; 0 otherwise. */
static int
batch_commits(const uint8_t *data, Py_ssize_t n, int64_t count, int64_t base_offset, int groups, Commit *out)
{
    const uint8_t *p = data, *end = data + n;
    for (int64_t i = 0; i < count; i++) {
        int64_t offset_delta, key_len, value_len;
        const uint8_t *key, *value;
        if (read_record(&p, end, &offset_delta, &key, &key_len, &value, &value_len) < 0 || key == NULL)
            return 0;
        int16_t type;
        Py_ssize_t fields = commit_key(key, (Py_ssize_t)key_len, groups && value == NULL, &type);
        if (fields < 0 || (value != NULL && !commit_value(value, (Py_ssize_t)value_len)))
            return 0;
        if (__builtin_add_overflow(base_offset, offset_delta, &out[i].offset))
            return 0;
        out[i].key = key + 2;
        out[i].key_len = fields;
        out[i].value = value;
        out[i].value_len = value_len;
        out[i].group_tombstone = type == GROUP_METADATA;
    }
    return p == end;
}

#define CONTROL_ABORT 0                     /* ControlRecordType ids */
#define CONTROL_COMMIT 1

/* Whether data[0:n] is one control record that reads and is a transaction's COMMIT or ABORT marker (a key
 * of version >= 0 and type 0 or 1, a value of version >= 0 with its coordinator epoch: what
 * lookupd.format.records.control_record reads without a fault); *commit set. Others are the Python replay's. */
static int
end_marker(const uint8_t *data, Py_ssize_t n, int *commit)
{
    const uint8_t *p = data, *key, *value;
    int64_t offset_delta, key_len, value_len;
    if (read_record(&p, data + n, &offset_delta, &key, &key_len, &value, &value_len) < 0 || p != data + n ||
        key_len < 4 || (int16_t)be16(key) < 0 || value_len < 6 || (int16_t)be16(value) < 0)
        return 0;
    int16_t type = (int16_t)be16(key + 2);
    if (type != CONTROL_ABORT && type != CONTROL_COMMIT)
        return 0;
    *commit = type == CONTROL_COMMIT;
    return 1;
}

/* ------------------------------------------------------------------ commit_runs */

/* What a call notes besides the table: the keys tombstoned (when asked), the groups removed. */
typedef struct {
    PyObject *tombstoned, *removed;     /* tombstoned: NULL when not asked for */
    Table seen;                         /* what was noted (as keys: fields, and a group's name behind a 0xFF) */
} Notes;

/* Note p[0:n] in `list` once per call (`tag` tells fields from group names apart in `seen`). */
static int
note_once(Notes *notes, PyObject *list, uint8_t tag, const uint8_t *p, Py_ssize_t n)
{
    uint8_t small[512];
    uint8_t *k = n + 1 <= (Py_ssize_t)sizeof small ? small : malloc((size_t)n + 1);
    if (k == NULL)
        return -1;
    k[0] = tag;
    memcpy(k + 1, p, (size_t)n);
    int oom = 0;
    Py_ssize_t before = notes->seen.n_entries;
    Entry *e = table_find(&notes->seen, k, n + 1, 1, &oom);
    if (k != small)
        free(k);
    if (e == NULL)
        return -1;
    if (notes->seen.n_entries == before)
        return 0;
    PyObject *b = PyBytes_FromStringAndSize((const char *)p, n);
    int err = b == NULL || PyList_Append(list, b) < 0;
    Py_XDECREF(b);
    return err ? -1 : 0;
}

/* Apply one checked record to the table and note it. */
static int
apply(CommitTable *ct, Notes *notes, const Commit *c)
{
    int oom = 0;
    Py_ssize_t glen = (int16_t)be16(c->key);
    if (c->group_tombstone) {           /* the group goes (its offsets stay): as a simple group here, and
                                         * as the group its records made in Python */
        Entry *g = ct_group(ct, c->key + 2, glen, 0, &oom);
        if (g != NULL)
            g->value_len = -1;
        return note_once(notes, notes->removed, 0xFF, c->key + 2, glen);
    }
    Py_ssize_t pn = c->key_len - 4;     /* (a commit key's fields: group, topic, partition, nothing after) */
    if (c->value == NULL) {  /* a tombstone, for a key committed or not (pending offsets go either way) */
        Part *q;
        Entry *x;
        if (ct_find_hashed(ct, c->key, c->key_len, pn, c->hash, &q, &x))
            ct_remove_found(ct, q, x);
        return notes->tombstoned == NULL ? 0 : note_once(notes, notes->tombstoned, 0, c->key, c->key_len);
    }
    Entry *g = c->same_group ? &ct->groups.entries[ct->last_group - 1] :
               ct_last_group(ct, c->key + 2, glen);  /* a commit makes its group, if there is none */
    if (g == NULL) {
        g = ct_group_find(ct, c->key + 2, glen, c->new_group ? c->group_hash : hash_bytes(c->key + 2, glen), 1, &oom);
        if (g == NULL)
            return -1;
    }
    g->value_len = 0;
    Entry *e;
    if (c->same_topic) {
        e = &ct->t.entries[ct->last_topic - 1];
    } else {
        e = ct_topic(ct, c->key, pn, c->hash, 1, &oom);
        if (e == NULL)
            return -1;
        ct->last_topic = e - ct->t.entries + 1;
    }
    int64_t p = (int32_t)be32(c->key + pn);
    if (p < 0 || p >= e->value_cap) {   /* (a new (group, topic)'s first commit, most often) */
        int r = ct_grow_parts(ct, e - ct->t.entries, p);
        if (r < 0)
            return -1;
        if (r == 0) {
            Entry *x = ct_odd(ct, c->key, c->key_len, 1, &oom);
            return x == NULL || entry_set(&ct->odd, x, c->offset, c->value, c->value_len) < 0 ? -1 : 0;
        }
    }
    Part *q = &ct->parts[e->value_at + p];
    e->offset += q->value_len < 0;
    return part_set(ct, q, c->offset, c->value, c->value_len);
}

/* A transactional batch's checked records, for the caller: (producer id, [(fields, offset, value | None)]). */
static PyObject *
transactional(int64_t producer_id, const Commit *recs, int64_t count)
{
    PyObject *list = PyList_New(count);
    for (int64_t i = 0; list != NULL && i < count; i++) {
        const Commit *c = &recs[i];
        PyObject *item = c->value == NULL ?
            Py_BuildValue("(y#LO)", (const char *)c->key, c->key_len, (long long)c->offset, Py_None) :
            Py_BuildValue("(y#Ly#)", (const char *)c->key, c->key_len, (long long)c->offset,
                          (const char *)c->value, c->value_len);
        if (item == NULL)
            Py_CLEAR(list);
        else
            PyList_SET_ITEM(list, i, item);
    }
    return list == NULL ? NULL : Py_BuildValue("(LN)", (long long)producer_id, list);
}

/* Records gathered before they are applied: enough for their cache misses to overlap, few enough for
 * what was fetched to stay in the cache until it is used. */
#define GATHER 256

/* Apply recs[0:n] (checked records, in offset order) to the table and note them. Their slots, then the
 * entries of keys seen before, then those keys' and values' bytes are fetched first, all together,
 * rather than one miss after another as each record is applied. */
static int
apply_all(CommitTable *ct, Notes *notes, Commit *recs, Py_ssize_t n)
{
    Table *t = &ct->t;
    uint64_t prefix = 0;                /* hash_bytes of the key before its partition, the last record's */
    for (Py_ssize_t i = 0; i < n; i++) {
        Commit *c = &recs[i];
        Py_ssize_t glen = (int16_t)be16(c->key);   /* (the group's slot too, where it changes) */
        c->same_topic = 0;
        if (c->key_len < 4) {
            c->hash = hash_bytes(c->key, c->key_len);
            c->new_group = 1;
        } else if (i > 0 && c->key_len == recs[i - 1].key_len && same(c->key, recs[i - 1].key, c->key_len - 4)) {
            /* the group and topic of the record before, another partition (no group tombstone's key, its
             * group alone, is as long as a commit key and starts with the same bytes but its last 4) */
            c->hash = prefix;
            c->new_group = 0;           /* (a hint for commits, whose group is then the record before's) */
            c->same_topic = c->value != NULL && recs[i - 1].value != NULL;  /* (whose apply left it as last_topic) */
        } else {
            c->hash = prefix = hash_bytes(c->key, c->key_len - 4);
            c->new_group = i == 0 || glen != (int16_t)be16(recs[i - 1].key) ||
                           !same(c->key + 2, recs[i - 1].key + 2, glen);
        }
        if (!c->same_topic)
            table_prefetch(t, c->hash);
        c->same_group = i > 0 && !c->new_group && c->value != NULL && recs[i - 1].value != NULL;
        if (c->new_group) {
            c->group_hash = hash_bytes(c->key + 2, glen);
            table_prefetch(&ct->groups, c->group_hash);
        }
    }
    for (Py_ssize_t i = 0; i < n; i++)
        recs[i].seen = recs[i].same_topic ? NULL : table_prefetch_entry(t, recs[i].hash);
    for (Py_ssize_t i = 0; i < n; i++)
        if (recs[i].seen != NULL) {     /* the partition's commit, of a (group, topic) seen before */
            const Entry *e = recs[i].seen;
            __builtin_prefetch(t->arena + e->key_at);
            if (e->value_cap > 0)
                __builtin_prefetch(&ct->parts[e->value_at], 1);
        }
    for (Py_ssize_t i = 0; i < n; i++)
        if (apply(ct, notes, &recs[i]) < 0)
            return -1;
    return 0;
}

PyObject *
commit_runs(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t start, stop;
    CommitTable *ct;
    int note_tombstones;
    if (!PyArg_ParseTuple(args, "y*nnO!p", &view, &start, &stop, &CommitTableType, &ct, &note_tombstones))
        return NULL;
    if (start < 0 || stop > view.len || start > stop) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "start and end must lie within the buffer");
        return NULL;
    }
    const uint8_t *buf = (const uint8_t *)view.buf;
    if (ct->scanned > 0) {              /* the (group, topic)s and groups to come, at the rate of those so far */
        double rate = (double)ct->reserved / (double)ct->scanned;
        double expect = rate * (double)ct->t.n_entries, groups = rate * (double)ct->groups.n_entries;
        ct->t.expect = expect < (double)MAX_ENTRIES ? (Py_ssize_t)expect : MAX_ENTRIES;
        ct->groups.expect = groups < (double)MAX_ENTRIES ? (Py_ssize_t)groups : MAX_ENTRIES;
    }
    Notes notes = {note_tombstones ? PyList_New(0) : Py_NewRef(Py_None), PyList_New(0), {0}};
    PyObject *txn = NULL, *marker = NULL;
    Commit *recs = NULL;               /* recs[0:n]: taken, not applied yet; a batch being checked after them */
    Py_ssize_t recs_cap = 0, n = 0;
    Py_ssize_t pos = start;
    int64_t next_offset = -1;
    int err = notes.tombstoned == NULL || notes.removed == NULL;
    PyObject *tombstoned = notes.tombstoned;   /* (the reference the answer hands on: a list, or None) */
    if (notes.tombstoned == Py_None)
        notes.tombstoned = NULL;
    while (!err && stop - pos >= V2_HEADER) {
        const uint8_t *b = buf + pos;
        int64_t length = (int32_t)be32(b + LENGTH_AT);
        Py_ssize_t size = (Py_ssize_t)length + LOG_OVERHEAD;
        if (length < V2_HEADER - LOG_OVERHEAD || size > stop - pos || b[MAGIC_AT] != 2)
            break;
        uint16_t attrs = be16(b + ATTRIBUTES_AT);
        int64_t count = (int32_t)be32(b + RECORD_COUNT_AT), last_offset;
        int64_t base_offset = (int64_t)be64(b + BASE_OFFSET_AT), producer_id = (int64_t)be64(b + PRODUCER_ID_AT);
        if (count < 0 ||
            __builtin_add_overflow(base_offset, (int64_t)(int32_t)be32(b + LAST_OFFSET_DELTA_AT), &last_offset) ||
            last_offset == INT64_MAX ||     /* (its next offset would not fit: the Python replay's) */
            crc32c_of(b + CRC_START, (size_t)(size - CRC_START)) != be32(b + CRC_AT))
            break;
        if (attrs & ATTR_CONTROL) {         /* a transaction's marker ends the walk, answered for the caller */
            int commit;
            if ((attrs & ATTR_CODEC) || count != 1 || !end_marker(b + V2_HEADER, size - V2_HEADER, &commit))
                break;
            err = n > 0 && apply_all(ct, &notes, recs, n) < 0;
            n = 0;
            marker = err ? NULL : Py_BuildValue("(LO)", (long long)producer_id, commit ? Py_True : Py_False);
            err = err || marker == NULL;
            if (!err) {
                next_offset = next_offset > last_offset ? next_offset : last_offset + 1;
                pos += size;
            }
            break;
        }
        if (count > 0) {
            const uint8_t *records = b + V2_HEADER;
            Py_ssize_t records_len = size - V2_HEADER;
            if (attrs & ATTR_CODEC) {
                /* (the decompressed bytes are a buffer the next batch's decompression reuses: what was
                 * gathered is applied first, while the bytes it points into are still its own) */
                if (n > 0) {
                    err = apply_all(ct, &notes, recs, n) < 0;
                    n = 0;
                    if (err)
                        break;
                }
                uint8_t *out;
                records_len = codecs_decompress(attrs & ATTR_CODEC, records, (size_t)records_len, MAX_DECOMPRESSED, &out);
                if (records_len < 0)
                    break;
                records = out;
            }
            if (count > records_len)   /* every record takes at least a byte */
                break;
            if (n + count > recs_cap) {
                Py_ssize_t cap = n + count > 2 * recs_cap ? n + count : 2 * recs_cap;
                Commit *c = realloc(recs, (size_t)cap * sizeof *c);
                if (c == NULL) {
                    PyErr_NoMemory();
                    err = 1;
                    break;
                }
                recs = c;
                recs_cap = cap;
            }
            if (!batch_commits(records, records_len, count, base_offset, producer_id == -1, recs + n))
                break;
            if (producer_id != -1) {
                err = n > 0 && apply_all(ct, &notes, recs, n) < 0;
                txn = err ? NULL : transactional(producer_id, recs + n, count);
                n = 0;
                err = err || txn == NULL;
                if (!err) {
                    next_offset = next_offset > last_offset ? next_offset : last_offset + 1;
                    pos += size;
                }
                break;
            }
            n += count;
            if (n >= GATHER || (attrs & ATTR_CODEC)) {
                err = apply_all(ct, &notes, recs, n) < 0;
                n = 0;
                if (err)
                    break;
            }
        } else if (producer_id != -1) {
            err = n > 0 && apply_all(ct, &notes, recs, n) < 0;
            txn = err ? NULL : transactional(producer_id, recs, 0);
            n = 0;
            err = err || txn == NULL;
            if (!err) {
                next_offset = next_offset > last_offset ? next_offset : last_offset + 1;
                pos += size;
            }
            break;
        }
        next_offset = next_offset > last_offset ? next_offset : last_offset + 1;  /* (the largest, as the Python
                                                                                 * replay keeps it: base offsets
                                                                                 * are not under the CRC) */
        pos += size;
    }
    if (!err && n > 0)
        err = apply_all(ct, &notes, recs, n) < 0;
    PyBuffer_Release(&view);
    free(recs);
    table_free(&notes.seen);
    ct->t.expect = ct->groups.expect = 0;
    ct->scanned += pos - start;
    ct->reserved = ct->reserved > pos - start ? ct->reserved - (pos - start) : 0;
    if (!err && ct_maybe_compact(ct) < 0)
        err = 1;
    if (err) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        Py_XDECREF(tombstoned);
        Py_XDECREF(notes.removed);
        Py_XDECREF(txn);
        Py_XDECREF(marker);
        return NULL;
    }
    return Py_BuildValue("(nLNNNN)", pos, (long long)next_offset, tombstoned, notes.removed,
                         txn == NULL ? Py_NewRef(Py_None) : txn, marker == NULL ? Py_NewRef(Py_None) : marker);
}
