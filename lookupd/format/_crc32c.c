/* CRC32C (Castagnoli), the checksum of v2 batches. */
#include "_decode.h"

static uint32_t crc_table[256];

static void
crc_table_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0x82F63B78u & (uint32_t)-(int32_t)(c & 1));
        crc_table[i] = c;
    }
}

static uint32_t
crc32c_sw(const uint8_t *p, size_t n)
{
    uint32_t crc = 0xFFFFFFFFu;
    while (n--)
        crc = (crc >> 8) ^ crc_table[(crc ^ *p++) & 0xFF];
    return ~crc;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
/*
 * The crc32 instruction takes 3 cycles and can start one every cycle, so three independent runs
 * go three times as fast as one: a batch is taken CRC_STRIDE * 3 bytes at a time, as three
 * streams, the second and third started from a zero register. Their results are joined by
 * linearity: the register after data A then B, from x, is shift(R(x, A)) ^ R(0, B), where
 * shift(v) is the register after CRC_STRIDE zero bytes from v, a linear map of v, applied
 * through four tables of 256 entries (crc_shift_init).
 */
#define CRC_STRIDE 512
static uint32_t crc_shift[4][256];

static inline uint64_t
load64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

__attribute__((target("sse4.2"))) static void
crc_shift_init(void)
{
    uint32_t basis[32];             /* shift(1 << i) */
    for (int i = 0; i < 32; i++) {
        uint64_t c = (uint64_t)1 << i;
        for (int k = 0; k < CRC_STRIDE; k += 8)
            c = _mm_crc32_u64(c, 0);
        basis[i] = (uint32_t)c;
    }
    for (int t = 0; t < 4; t++)
        for (uint32_t b = 0; b < 256; b++) {
            uint32_t v = b << (8 * t), out = 0;
            for (int i = 0; i < 32; i++)
                if (v >> i & 1)
                    out ^= basis[i];
            crc_shift[t][b] = out;
        }
}

static inline uint32_t
crc_shifted(uint32_t v)
{
    return crc_shift[0][v & 0xFF] ^ crc_shift[1][v >> 8 & 0xFF] ^ crc_shift[2][v >> 16 & 0xFF] ^ crc_shift[3][v >> 24];
}

__attribute__((target("sse4.2"))) static uint32_t
crc32c_hw(const uint8_t *p, size_t n)
{
    uint64_t crc = 0xFFFFFFFFu;
    while (n >= 3 * CRC_STRIDE) {
        uint64_t b = 0, c = 0;
        for (size_t i = 0; i < CRC_STRIDE; i += 8) {
            crc = _mm_crc32_u64(crc, load64(p + i));
            b = _mm_crc32_u64(b, load64(p + CRC_STRIDE + i));
            c = _mm_crc32_u64(c, load64(p + 2 * CRC_STRIDE + i));
        }
        crc = crc_shifted(crc_shifted((uint32_t)crc) ^ (uint32_t)b) ^ (uint32_t)c;
        p += 3 * CRC_STRIDE;
        n -= 3 * CRC_STRIDE;
    }
    while (n >= 8) {
        crc = _mm_crc32_u64(crc, load64(p));
        p += 8;
        n -= 8;
    }
    uint32_t c = (uint32_t)crc;
    while (n--)
        c = _mm_crc32_u8(c, *p++);
    return ~c;
}
#endif

static int have_hw;                 /* SSE4.2 is there (set by crc32c_init) */

/* The tables, and whether this CPU has the crc32 instruction: once, when the module loads. */
void
crc32c_init(void)
{
    crc_table_init();
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    have_hw = __builtin_cpu_supports("sse4.2");
    if (have_hw)
        crc_shift_init();
#endif
}

uint32_t
crc32c_of(const uint8_t *p, size_t n)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (have_hw)
        return crc32c_hw(p, n);
#endif
    return crc32c_sw(p, n);
}

/* crc32c(data) -> the CRC32C of the bytes. */
PyObject *
py_crc32c(PyObject *self, PyObject *arg)
{
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    uint32_t crc = crc32c_of((const uint8_t *)view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(crc);
}
