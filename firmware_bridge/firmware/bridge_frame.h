/* Reference encoder of the syncedge bridge frame, version 1.
 * Specification: docs/bridge-frame-protocol.md. Portable C99, no allocation, no libc beyond
 * <stdint.h>/<stddef.h>/<string.h>; suitable for a microcontroller's send loop. */
#ifndef SYNCEDGE_BRIDGE_FRAME_H
#define SYNCEDGE_BRIDGE_FRAME_H

#include <stddef.h>
#include <stdint.h>

#define BF_VERSION 1u
#define BF_MAX_JOINTS 32u
#define BF_FLAG_FAULT 0x01u
/* Raw frame size before COBS: 16-byte header, three float32 arrays, CRC-32. */
#define BF_RAW_SIZE(j) (16u + 12u * (j) + 4u)
/* Worst-case wire size: COBS adds one byte per 254 plus one, then the 0x00 delimiter. */
#define BF_WIRE_MAX(j) (BF_RAW_SIZE(j) + BF_RAW_SIZE(j) / 254u + 2u)

/* CRC-32/ISO-HDLC (reflected 0xEDB88320, init and xorout 0xFFFFFFFF) of len bytes. */
uint32_t bf_crc32(const uint8_t *data, size_t len);

/* Encode one frame into out (capacity cap) as COBS(frame) followed by 0x00.
 * pos/vel/eff hold `joints` floats (rad, rad/s, N*m). Returns the number of bytes written,
 * or 0 if joints is 0 or above BF_MAX_JOINTS or cap is below BF_WIRE_MAX(joints). */
size_t bf_encode(uint8_t *out, size_t cap, uint32_t sequence, uint64_t device_time_us,
                 uint8_t flags, uint8_t joints, const float *pos, const float *vel,
                 const float *eff);

#endif
