/* Decompression of Kafka batches' records from C (see _codecs.c). */
#ifndef LOOKUPD_CODECS_H
#define LOOKUPD_CODECS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* Kafka's codec ids (the low three bits of a batch's attributes). */
enum { CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD };

/* Whether this machine has the library for `codec` (loaded at the first call). */
int codecs_available(int codec);

/* Decompress src[0:n] compressed with `codec` into a scratch buffer, valid until the next call;
 * returns the output's length and sets *out, or -1 (no Python error set) when the reference,
 * lookupd.format.compression, must take it. Output over max_out is never produced. */
Py_ssize_t codecs_decompress(int codec, const uint8_t *src, size_t n, size_t max_out, uint8_t **out);

#endif
