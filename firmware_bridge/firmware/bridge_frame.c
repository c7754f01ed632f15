/* Reference encoder of the syncedge bridge frame, ping receiver and pong encoder
 * (see bridge_frame.h). */
#include "bridge_frame.h"

#include <string.h>

uint32_t bf_crc32(const uint8_t *data, size_t len)
{
    uint32_t crc = 0xFFFFFFFFu;
    for (size_t i = 0; i < len; ++i) {
        crc ^= data[i];
        for (int b = 0; b < 8; ++b)
            crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
    }
    return crc ^ 0xFFFFFFFFu;
}

static void put_le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; ++i)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i)
        v = (v << 8) | p[i];
    return v;
}

static void put_floats(uint8_t *p, const float *v, uint8_t n)
{
    for (uint8_t i = 0; i < n; ++i) {
        uint32_t bits;
        memcpy(&bits, &v[i], 4); /* IEEE 754 binary32, written little-endian */
        put_le(p + 4u * i, bits, 4);
    }
}

/* COBS: encode n bytes of in into out; returns the encoded length (no delimiter). */
static size_t cobs(const uint8_t *in, size_t n, uint8_t *out)
{
    size_t code_at = 0, w = 1;
    uint8_t code = 1;
    for (size_t i = 0; i < n; ++i) {
        if (in[i] == 0) {
            out[code_at] = code;
            code_at = w++;
            code = 1;
        } else {
            out[w++] = in[i];
            if (++code == 0xFF) {
                out[code_at] = code;
                code_at = w++;
                code = 1;
            }
        }
    }
    out[code_at] = code;
    return w;
}

size_t bf_encode(uint8_t *out, size_t cap, uint32_t sequence, uint64_t device_time_us,
                 uint8_t flags, uint8_t joints, const float *pos, const float *vel,
                 const float *eff)
{
    uint8_t raw[BF_RAW_SIZE(BF_MAX_JOINTS)];
    if (joints == 0 || joints > BF_MAX_JOINTS || cap < BF_WIRE_MAX(joints))
        return 0;
    raw[0] = BF_VERSION;
    raw[1] = flags;
    raw[2] = joints;
    raw[3] = BF_TYPE_SAMPLE;
    put_le(raw + 4, sequence, 4);
    put_le(raw + 8, device_time_us, 8);
    put_floats(raw + 16, pos, joints);
    put_floats(raw + 16 + 4u * joints, vel, joints);
    put_floats(raw + 16 + 8u * joints, eff, joints);
    size_t body = 16u + 12u * joints;
    put_le(raw + body, bf_crc32(raw, body), 4);
    size_t n = cobs(raw, body + 4u, out);
    out[n++] = 0;
    return n;
}

size_t bf_encode_pong(uint8_t *out, size_t cap, uint32_t sequence, uint64_t device_rx_us,
                      uint64_t device_tx_us, uint64_t host_time_us, uint8_t flags)
{
    uint8_t raw[BF_PONG_RAW_SIZE];
    if (cap < BF_PONG_WIRE_MAX || device_tx_us < device_rx_us)
        return 0;
    raw[0] = BF_VERSION;
    raw[1] = flags;
    raw[2] = 0;
    raw[3] = BF_TYPE_PONG;
    put_le(raw + 4, sequence, 4);
    put_le(raw + 8, device_rx_us, 8);
    put_le(raw + 16, device_tx_us, 8);
    put_le(raw + 24, host_time_us, 8);
    put_le(raw + 32, bf_crc32(raw, 32u), 4);
    size_t n = cobs(raw, BF_PONG_RAW_SIZE, out);
    out[n++] = 0;
    return n;
}

/* COBS: decode n bytes of in into out (capacity cap); returns the length or -1. */
static long uncobs(const uint8_t *in, size_t n, uint8_t *out, size_t cap)
{
    size_t i = 0, w = 0;
    while (i < n) {
        uint8_t code = in[i];
        if (code == 0 || i + code > n)
            return -1;
        for (size_t k = i + 1; k < i + code; ++k) {
            if (in[k] == 0 || w >= cap)
                return -1;
            out[w++] = in[k];
        }
        i += code;
        if (code != 0xFF && i < n) {
            if (w >= cap)
                return -1;
            out[w++] = 0;
        }
    }
    return (long)w;
}

int bf_decode_ping(const uint8_t *block, size_t len, uint32_t *sequence,
                   uint64_t *host_time_us)
{
    uint8_t raw[BF_RX_CAP];
    if (len > BF_RX_CAP)
        return BF_ERR_LENGTH;
    long n = uncobs(block, len, raw, sizeof raw);
    if (n < 0)
        return BF_ERR_COBS;
    if (n >= 4 && (raw[3] != BF_TYPE_PING || raw[2] != 0))
        return BF_ERR_TYPE;
    if (n != (long)BF_PING_RAW_SIZE)
        return BF_ERR_LENGTH;
    if ((uint32_t)get_le(raw + 16, 4) != bf_crc32(raw, 16u))
        return BF_ERR_CRC;
    if (raw[0] != BF_VERSION)
        return BF_ERR_VERSION;
    *sequence = (uint32_t)get_le(raw + 4, 4);
    *host_time_us = get_le(raw + 8, 8);
    return 0;
}

void bf_rx_init(bf_rx *rx)
{
    memset(rx, 0, sizeof *rx);
}

int bf_rx_byte(bf_rx *rx, uint8_t byte, uint32_t *sequence, uint64_t *host_time_us)
{
    if (byte != 0) {
        if (rx->len < BF_RX_CAP)
            rx->buf[rx->len++] = byte;
        else
            rx->overflow = 1;
        return 0;
    }
    int result = 0;
    if (rx->overflow) {
        rx->last_error = BF_ERR_LENGTH;
        rx->errors++;
    } else if (rx->len > 0) {
        int e = bf_decode_ping(rx->buf, rx->len, sequence, host_time_us);
        if (e == 0) {
            result = 1;
        } else {
            rx->last_error = e;
            rx->errors++;
        }
    }
    rx->len = 0;
    rx->overflow = 0;
    return result;
}
