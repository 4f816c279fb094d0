/*
 * Decompression of a batch's records from C: Kafka's codecs through libraries that define them
 * (libdeflate for gzip, liblz4, Google's libsnappy; zstd through the Python package the reference
 * uses, see below), with Kafka's framing (gzip members, the LZ4 frame of Lz4BlockOutputStream,
 * xerial snappy chunks, one zstd frame) parsed here.
 *
 * This is a fast path beside lookupd.format.compression, the reference: it takes only what the
 * reference accepts and then gives the same bytes. Anything else (a library that is not
 * installed, a form it does not handle, any fault, output over the caller's limit) returns -1
 * with no Python error set, and the caller runs the reference, which answers or names the
 * fault. The libraries are found with dlopen at the first call, so a machine without one still
 * imports the module and decompresses that codec in Python.
 *
 * Every read is bounded by the input's length; every write by the output's capacity, which is
 * bounded before the output is allocated (the reference's limits, see compression.py).
 * Output goes to a scratch buffer reused across calls: the caller copies or decodes it before
 * the next call. The GIL serialises callers (no call releases it).
 */
#include "_codecs.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

/* Library entry points, declared as their stable ABIs define them (no -dev headers needed). */
static int (*lz4_decompress_safe)(const char *src, char *dst, int src_size, int dst_capacity);
static void *(*deflate_alloc)(void);
static int (*deflate_gzip_ex)(void *d, const void *in, size_t in_n, void *out, size_t out_avail, size_t *in_used,
                              size_t *out_used);
static int (*snappy_length)(const char *src, size_t n, size_t *out_n);
static int (*snappy_uncompress)(const char *src, size_t n, char *dst, size_t *dst_n);

/* zstd goes through the reference's own library, `zstandard` (compression._zstd_frame, its context kept
 * per thread): another libzstd version decodes some damaged frames to other bytes, where a frame has no
 * checksum to catch it. */
static PyObject *zstd_frame;
static PyObject *held;                  /* the last zstd output, alive until the next call */

static void *deflater;
static int loaded;

static void *
symbol(void *lib, const char *name)
{
    return lib ? dlsym(lib, name) : NULL;
}

static void
load(void)
{
    loaded = 1;
    void *lib = dlopen("liblz4.so.1", RTLD_NOW | RTLD_LOCAL);
    lz4_decompress_safe = symbol(lib, "LZ4_decompress_safe");
    PyObject *m = PyImport_ImportModule("lookupd.format.compression");
    if (m != NULL) {
        zstd_frame = PyObject_GetAttrString(m, "_zstd_frame");
        Py_DECREF(m);
    }
    PyErr_Clear();
    lib = dlopen("libdeflate.so.0", RTLD_NOW | RTLD_LOCAL);
    deflate_alloc = symbol(lib, "libdeflate_alloc_decompressor");
    deflate_gzip_ex = symbol(lib, "libdeflate_gzip_decompress_ex");
    if (deflate_alloc && deflate_gzip_ex)
        deflater = deflate_alloc();
    lib = dlopen("libsnappy.so.1", RTLD_NOW | RTLD_LOCAL);
    snappy_length = symbol(lib, "snappy_uncompressed_length");
    snappy_uncompress = symbol(lib, "snappy_uncompress");
}

int
codecs_available(int codec)
{
    if (!loaded)
        load();
    switch (codec) {
    case CODEC_GZIP: return deflater != NULL;
    case CODEC_SNAPPY: return snappy_length && snappy_uncompress;
    case CODEC_LZ4: return lz4_decompress_safe != NULL;
    case CODEC_ZSTD: return zstd_frame != NULL;
    default: return 0;
    }
}

/* ------------------------------------------------------------------ scratch */

/* Kept between calls up to this size (a batch is at most 1 MiB by default, 8 MiB decompressed is
 * generous); a bigger output gets a buffer that the next call frees. */
#define SCRATCH_KEPT (8u << 20)

static uint8_t *scratch;
static size_t scratch_cap;

static uint8_t *
out_buffer(size_t need)
{
    if (scratch_cap > SCRATCH_KEPT) {   /* the last output was a big one: give its memory back */
        free(scratch);
        scratch = NULL;
        scratch_cap = 0;
    }
    if (need <= scratch_cap)
        return scratch;
    size_t cap = need < (64u << 10) ? (64u << 10) : need;
    uint8_t *p = malloc(cap);
    if (p == NULL)
        return NULL;
    free(scratch);
    scratch = p;
    scratch_cap = cap;
    return p;
}

static inline uint32_t le32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static inline uint32_t rd_be32(const uint8_t *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }

/* ------------------------------------------------------------------ gzip */

/* Members with the plain header Java's GZIPOutputStream writes (magic, deflate, no flags); another
 * header goes to the reference, which hands it to zlib. Bytes after a member that do not start
 * another ("\x1f\x8b") are ignored, as in Java. */
#define DEFLATE_MAX_RATIO 1032u       /* deflate's largest expansion: 258 bytes from a 2-bit match code */

static Py_ssize_t
gunzip(const uint8_t *src, size_t n, size_t max_out, uint8_t **out)
{
    if (n < 8)
        return -1;
    /* ISIZE of the last member (exact for one member and no trailing bytes); more room when that
     * is too small, and the reference when even that is. */
    size_t cap = le32(src + n - 4);
    if (cap < 4 * n + 1024)
        cap = 4 * n + 1024;
    if (cap > DEFLATE_MAX_RATIO * n)    /* trailing bytes, not a size: no more than the input can make */
        cap = DEFLATE_MAX_RATIO * n;
    if (cap > max_out)
        cap = max_out;
    uint8_t *o = out_buffer(cap);
    if (o == NULL)
        return -1;
    size_t pos = 0, total = 0;
    for (;;) {
        if (n - pos < 4 || memcmp(src + pos, "\x1f\x8b\x08\x00", 4) != 0)
            return -1;
        size_t used_in, used_out;
        if (deflate_gzip_ex(deflater, src + pos, n - pos, o + total, cap - total, &used_in, &used_out) != 0)
            return -1;                  /* bad data, or more output than room: the reference decides */
        total += used_out;
        pos += used_in;
        if (n - pos < 2 || src[pos] != 0x1f || src[pos + 1] != 0x8b)
            break;
    }
    *out = o;
    return (Py_ssize_t)total;
}

/* ------------------------------------------------------------------ snappy */

static const uint8_t SNAPPY_MAGIC[8] = {0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0};
#define SNAPPY_HEADER 16                /* magic, version, compatible version */

/* xerial chunks ([int32 BE length][raw block]), concatenated streams allowed, or one raw block. */
static Py_ssize_t
unsnappy(const uint8_t *src, size_t n, size_t max_out, uint8_t **out)
{
    size_t len;
    if (n < 8 || memcmp(src, SNAPPY_MAGIC, 8) != 0) {
        if (snappy_length((const char *)src, n, &len) != 0 || len > max_out)
            return -1;
        uint8_t *o = out_buffer(len ? len : 1);
        if (o == NULL || snappy_uncompress((const char *)src, n, (char *)o, &len) != 0)
            return -1;
        *out = o;
        return (Py_ssize_t)len;
    }
    if (n < SNAPPY_HEADER || (int32_t)rd_be32(src + 8) < 1)
        return -1;
    /* Two passes: the chunks' declared sizes bound the output, then each is decompressed. */
    size_t total = 0;
    for (int pass = 0; pass < 2; pass++) {
        uint8_t *o = NULL;
        if (pass == 1 && (o = out_buffer(total ? total : 1)) == NULL)
            return -1;
        size_t pos = SNAPPY_HEADER, at = 0;
        while (n - pos >= 4) {          /* snappy-java stops at a partial length field */
            int32_t size = (int32_t)rd_be32(src + pos);
            if ((uint32_t)size == rd_be32(SNAPPY_MAGIC)) {  /* another stream's header, or the end */
                if (n - pos < 8 || memcmp(src + pos, SNAPPY_MAGIC, 8) != 0)
                    break;
                pos += SNAPPY_HEADER;
                if (pos > n)
                    break;
                continue;
            }
            pos += 4;
            if (size < 0 || (size_t)size > n - pos)
                return -1;
            if (pass == 0) {
                if (snappy_length((const char *)src + pos, (size_t)size, &len) != 0 || len > max_out - total)
                    return -1;
                total += len;
            } else {
                len = total - at;
                if (snappy_uncompress((const char *)src + pos, (size_t)size, (char *)o + at, &len) != 0)
                    return -1;
                at += len;
            }
            pos += (size_t)size;
        }
        if (pass == 1) {
            *out = o;
            return (Py_ssize_t)at;
        }
    }
    return -1;
}

/* ------------------------------------------------------------------ lz4 frame */

/* XXH32, seed 0, of fewer than 16 bytes (an LZ4 frame descriptor). */
static uint32_t
xxh32_short(const uint8_t *p, size_t n)
{
    const uint32_t P1 = 2654435761u, P2 = 2246822519u, P3 = 3266489917u, P4 = 668265263u, P5 = 374761393u;
    uint32_t h = P5 + (uint32_t)n;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        h += le32(p + i) * P3;
        h = ((h << 17) | (h >> 15)) * P4;
    }
    for (; i < n; i++) {
        h += p[i] * P5;
        h = ((h << 11) | (h >> 21)) * P1;
    }
    h = (h ^ (h >> 15)) * P2;
    h = (h ^ (h >> 13)) * P3;
    return h ^ (h >> 16);
}

#define LZ4_MAGIC 0x184D2204u
#define LZ4_UNCOMPRESSED 0x80000000u

/* One frame as Kafka's Lz4BlockInputStream reads it (see compression.py): version 1, independent
 * blocks, 64 KiB .. 4 MiB blocks, the descriptor's checksum right or Kafka's old broken one. */
static Py_ssize_t
unlz4(const uint8_t *src, size_t n, size_t max_out, uint8_t **out)
{
    if (n < 7 || le32(src) != LZ4_MAGIC)
        return -1;
    uint8_t flg = src[4], bd = src[5];
    if ((flg & 0x03) || flg >> 6 != 1 || !(flg & 0x20) || (bd & 0x8F) || ((bd >> 4) & 7) < 4)
        return -1;
    size_t max_block = (size_t)1 << (2 * ((bd >> 4) & 7) + 8);
    size_t pos = (flg & 0x08) ? 14 : 6;
    if (n < pos + 1)
        return -1;
    uint8_t hc = src[pos];
    if (hc != ((xxh32_short(src + 4, pos - 4) >> 8) & 0xFF) && hc != ((xxh32_short(src, pos) >> 8) & 0xFF))
        return -1;
    pos++;
    size_t check = (flg & 0x10) ? 4 : 0, bound = 0, first = pos;
    for (;;) {                          /* pass 1: the blocks' bounds */
        if (n - pos < 4)
            return -1;
        uint32_t size = le32(src + pos);
        pos += 4;
        if (size == 0)
            break;
        int raw = (size & LZ4_UNCOMPRESSED) != 0;
        size &= ~LZ4_UNCOMPRESSED;
        if (size > max_block || size + check > n - pos)
            return -1;
        bound += raw ? size : max_block;
        if (bound > max_out)
            return -1;
        pos += size + check;
    }
    uint8_t *o = out_buffer(bound ? bound : 1);
    if (o == NULL)
        return -1;
    size_t at = 0;
    for (pos = first;;) {               /* pass 2: each block into the room pass 1 gave it */
        uint32_t size = le32(src + pos);
        pos += 4;
        if (size == 0)
            break;
        size_t len = size & ~LZ4_UNCOMPRESSED;
        if (size & LZ4_UNCOMPRESSED) {
            memcpy(o + at, src + pos, len);
            at += len;
        } else {
            int got = lz4_decompress_safe((const char *)src + pos, (char *)o + at, (int)len, (int)max_block);
            if (got < 0)
                return -1;
            at += (size_t)got;
        }
        pos += len + check;
    }
    *out = o;
    return (Py_ssize_t)at;
}

/* ------------------------------------------------------------------ zstd */

#define ZSTD_MAGIC 0xFD2FB528u
#define ZSTD_BLOCK_MAX (128u << 10)

/* One zstd frame spanning the whole input (what Kafka's producer writes); its output is bounded by
 * the declared content size or, without one (zstd-jni's streams), by its blocks' headers. */
static Py_ssize_t
unzstd(const uint8_t *src, size_t n, size_t max_out, uint8_t **out)
{
    if (n < 5 || le32(src) != ZSTD_MAGIC)
        return -1;
    uint8_t fhd = src[4];
    int fcs_flag = fhd >> 6, single = (fhd & 0x20) != 0, checksum = (fhd & 0x04) != 0, dict = fhd & 0x03;
    if (dict)
        return -1;
    static const size_t FCS[4] = {0, 2, 4, 8};
    size_t fcs = fcs_flag ? FCS[fcs_flag] : (size_t)single;
    size_t pos = 5 + (single ? 0 : 1);
    uint64_t content = 0, blocks = 0;
    if (fcs) {
        if (pos > n || fcs > n - pos)
            return -1;
        for (size_t i = fcs; i-- > 0;)
            content = content << 8 | src[pos + i];
        if (fcs == 2)
            content += 256;
    }
    pos += fcs;
    for (;;) {
        if (pos > n || n - pos < 3)
            return -1;
        uint32_t h = (uint32_t)src[pos] | (uint32_t)src[pos + 1] << 8 | (uint32_t)src[pos + 2] << 16;
        uint32_t kind = (h >> 1) & 3, size = h >> 3;
        pos += 3;
        if (kind == 3)
            return -1;
        blocks += kind < 2 ? size : ZSTD_BLOCK_MAX;
        pos += kind == 1 ? 1 : size;
        if (h & 1)
            break;
    }
    pos += checksum ? 4 : 0;
    if (pos != n)                       /* more frames, or cut off: the reference */
        return -1;
    /* A declared size of 0, or more than the blocks can hold, is judged by the reference. */
    uint64_t bound = fcs ? content : blocks;
    if (bound == 0 || bound > blocks || bound > max_out)
        return -1;
    PyObject *view = PyMemoryView_FromMemory((char *)src, (Py_ssize_t)n, PyBUF_READ);
    if (view == NULL) {
        PyErr_Clear();
        return -1;
    }
    PyObject *got = PyObject_CallFunction(zstd_frame, "OK", view, (unsigned long long)bound);
    Py_DECREF(view);
    if (got == NULL || !PyBytes_Check(got)) {
        Py_XDECREF(got);
        PyErr_Clear();
        return -1;
    }
    Py_XSETREF(held, got);
    *out = (uint8_t *)PyBytes_AS_STRING(got);
    return PyBytes_GET_SIZE(got);
}

/* ------------------------------------------------------------------ */

Py_ssize_t
codecs_decompress(int codec, const uint8_t *src, size_t n, size_t max_out, uint8_t **out)
{
    if (!codecs_available(codec))
        return -1;
    switch (codec) {
    case CODEC_GZIP: return gunzip(src, n, max_out, out);
    case CODEC_SNAPPY: return unsnappy(src, n, max_out, out);
    case CODEC_LZ4: return unlz4(src, n, max_out, out);
    case CODEC_ZSTD: return unzstd(src, n, max_out, out);
    default: return -1;
    }
}
