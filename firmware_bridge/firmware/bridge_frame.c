/* Reference encoder of the syncedge bridge frame (see bridge_frame.h). */
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
    raw[3] = 0;
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
