/* Reference encoder of the syncedge bridge frame, version 1, and the device side of the
 * ping: a byte-wise receiver of host pings and the pong encoder.
 * Specification: docs/bridge-frame-protocol.md. Portable C99, no allocation, no libc beyond
 * <stdint.h>/<stddef.h>/<string.h>; suitable for a microcontroller's send loop. */
#ifndef SYNCEDGE_BRIDGE_FRAME_H
#define SYNCEDGE_BRIDGE_FRAME_H

#include <stddef.h>
#include <stdint.h>

#define BF_VERSION 1u
#define BF_MAX_JOINTS 32u
#define BF_FLAG_FAULT 0x01u
/* Frame type, byte 3 of every frame (reserved and 0 before pings existed). */
#define BF_TYPE_SAMPLE 0u
#define BF_TYPE_PING 1u
#define BF_TYPE_PONG 2u
/* Raw frame size before COBS: 16-byte header, three float32 arrays, CRC-32. */
#define BF_RAW_SIZE(j) (16u + 12u * (j) + 4u)
/* Worst-case wire size: COBS adds one byte per 254 plus one, then the 0x00 delimiter. */
#define BF_WIRE_MAX(j) (BF_RAW_SIZE(j) + BF_RAW_SIZE(j) / 254u + 2u)
/* Ping (host to device) and pong (device to host), raw and worst-case wire sizes. */
#define BF_PING_RAW_SIZE 20u
#define BF_PONG_RAW_SIZE 36u
#define BF_PING_WIRE_MAX (BF_PING_RAW_SIZE + 2u)
#define BF_PONG_WIRE_MAX (BF_PONG_RAW_SIZE + 2u)

/* Errors of bf_decode_ping (bf_rx.last_error), all negative. */
#define BF_ERR_COBS (-1)    /* a 0x00 inside the block, or a code byte past its end */
#define BF_ERR_LENGTH (-2)  /* not the 20 bytes of a ping */
#define BF_ERR_CRC (-3)     /* CRC-32 mismatch */
#define BF_ERR_VERSION (-4) /* version other than BF_VERSION */
#define BF_ERR_TYPE (-5)    /* a frame of another type (or a joint count other than 0) */

/* CRC-32/ISO-HDLC (reflected 0xEDB88320, init and xorout 0xFFFFFFFF) of len bytes. */
uint32_t bf_crc32(const uint8_t *data, size_t len);

/* Encode one frame into out (capacity cap) as COBS(frame) followed by 0x00.
 * pos/vel/eff hold `joints` floats (rad, rad/s, N*m). Returns the number of bytes written,
 * or 0 if joints is 0 or above BF_MAX_JOINTS or cap is below BF_WIRE_MAX(joints). */
size_t bf_encode(uint8_t *out, size_t cap, uint32_t sequence, uint64_t device_time_us,
                 uint8_t flags, uint8_t joints, const float *pos, const float *vel,
                 const float *eff);

/* Encode the answer to ping `sequence` into out (capacity cap) as COBS(pong) + 0x00:
 * device_rx_us: the device clock when the ping arrived (take it as close to the ping's last
 * byte as the firmware can: its receive interrupt); device_tx_us: the device clock now, as
 * the pong is queued for sending (>= device_rx_us); host_time_us: the ping's host time,
 * echoed; flags: BF_FLAG_FAULT or 0. Returns the bytes written, or 0 if cap is below
 * BF_PONG_WIRE_MAX or device_tx_us < device_rx_us. */
size_t bf_encode_pong(uint8_t *out, size_t cap, uint32_t sequence, uint64_t device_rx_us,
                      uint64_t device_tx_us, uint64_t host_time_us, uint8_t flags);

/* Decode one COBS block (the bytes between two 0x00 delimiters, without them) as a ping.
 * Returns 0 and sets *sequence and *host_time_us, or a negative BF_ERR_*. */
int bf_decode_ping(const uint8_t *block, size_t len, uint32_t *sequence,
                   uint64_t *host_time_us);

/* Byte-wise receiver of host-to-device frames: call bf_rx_byte for every received byte. */
#define BF_RX_CAP 32u
typedef struct {
    uint8_t buf[BF_RX_CAP];
    size_t len;
    int overflow;   /* the current block outgrew buf: discarded at its delimiter */
    int last_error; /* 0, or the BF_ERR_* of the last block that was not a ping */
    uint32_t errors; /* blocks discarded (noise, corrupt or foreign frames) */
} bf_rx;

void bf_rx_init(bf_rx *rx);

/* Feed one received byte. Returns 1 when it completed a valid ping (*sequence and
 * *host_time_us set: stamp the device clock now and answer with bf_encode_pong), else 0.
 * Empty blocks are skipped; bad blocks are counted in rx->errors, never answered. */
int bf_rx_byte(bf_rx *rx, uint8_t byte, uint32_t *sequence, uint64_t *host_time_us);

#endif
