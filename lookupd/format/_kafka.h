/*
 * Kafka's on-disk batch format for the C code of both layers (lookupd/format/_decode.c and its parts,
 * lookupd/log/_native.c): the layout constants of lookupd.format.batch and the bounded readers of
 * big-endian fields and zig-zag varints. Header-only: everything here is a constant or static inline.
 */
#ifndef LOOKUPD_KAFKA_H
#define LOOKUPD_KAFKA_H

#include <stdint.h>
#include <string.h>

/* Framing shared by every magic (FileLogInputStream): offset int64 and size int32 before each batch. */
#define LOG_OVERHEAD 12             /* batch.LOG_OVERHEAD */
#define HEADER_UP_TO_MAGIC 17       /* batch.HEADER_SIZE_UP_TO_MAGIC: fewer bytes left end a walk */
#define RECORD_OVERHEAD_V0 14       /* batch.RECORD_OVERHEAD_V0: the smallest legal size field */

/* A v2 batch's header (DefaultRecordBatch), by the byte offset of each field. */
#define BASE_OFFSET_AT 0            /* int64 */
#define LENGTH_AT 8                 /* int32: bytes after LOG_OVERHEAD */
#define LEADER_EPOCH_AT 12          /* int32: partition leader epoch */
#define MAGIC_AT 16                 /* int8 */
#define CRC_AT 17                   /* uint32: CRC32C of the bytes from CRC_START to the end */
#define ATTRIBUTES_AT 21            /* int16 */
#define LAST_OFFSET_DELTA_AT 23     /* int32 */
#define BASE_TIMESTAMP_AT 27        /* int64 */
#define MAX_TIMESTAMP_AT 35         /* int64 */
#define PRODUCER_ID_AT 43           /* int64 */
#define RECORD_COUNT_AT 57          /* int32 */
#define V2_HEADER 61                /* batch.V2_HEADER_SIZE: the records start here */
#define CRC_START 21                /* batch.V2_CRC_START */

/* Attributes (batch.py's masks). */
#define ATTR_CODEC 0x07
#define ATTR_LOG_APPEND_TIME 0x08
#define ATTR_TRANSACTIONAL 0x10
#define ATTR_CONTROL 0x20

/* compression.MAX_DECOMPRESSED_SIZE: Kafka counts a batch's uncompressed bytes in an int. */
#define MAX_DECOMPRESSED ((size_t)INT32_MAX)

/* Big-endian fields; the caller has checked that the bytes are there. */
static inline uint16_t
be16(const uint8_t *p)
{
    return (uint16_t)(p[0] << 8 | p[1]);
}

static inline uint32_t
be32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return __builtin_bswap32(v);
}

static inline uint64_t
be64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return __builtin_bswap64(v);
}

/* Zig-zag varint (at most 5 bytes, 32 bits kept) / varlong (10 bytes, 64 bits), as Kafka's ByteUtils:
 * 0 and *pp past it, or -1 when it runs past `end` or past its longest form. */
static inline int
read_varint(const uint8_t **pp, const uint8_t *end, int64_t *out)
{
    const uint8_t *p = *pp;
    uint32_t raw = 0;
    for (int shift = 0; shift < 35; shift += 7) {
        if (p >= end)
            return -1;
        uint8_t b = *p++;
        raw |= (uint32_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            *out = (int32_t)((raw >> 1) ^ (uint32_t)(-(int32_t)(raw & 1)));
            *pp = p;
            return 0;
        }
    }
    return -1;
}

static inline int
read_varlong(const uint8_t **pp, const uint8_t *end, int64_t *out)
{
    const uint8_t *p = *pp;
    uint64_t raw = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (p >= end)
            return -1;
        uint8_t b = *p++;
        raw |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            *out = (int64_t)((raw >> 1) ^ (uint64_t)(-(int64_t)(raw & 1)));
            *pp = p;
            return 0;
        }
    }
    return -1;
}

#endif
