/* Writes `count` frames of `joints` joints to stdout, with values a test can predict:
 *   position[j] = 0.001*seq + j, velocity[j] = -0.5*j, effort[j] = 0.25*j,
 *   device time = 1000*seq + 17 us, fault flag on every seq with seq % 7 == 3.
 * Usage: bridge_frame_demo COUNT JOINTS */
#include <stdio.h>
#include <stdlib.h>

#include "bridge_frame.h"

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s COUNT JOINTS\n", argv[0]);
        return 2;
    }
    unsigned long count = strtoul(argv[1], NULL, 10);
    unsigned joints = (unsigned)strtoul(argv[2], NULL, 10);
    if (joints == 0 || joints > BF_MAX_JOINTS) {
        fprintf(stderr, "joints must be 1..%u\n", BF_MAX_JOINTS);
        return 2;
    }
    float pos[BF_MAX_JOINTS], vel[BF_MAX_JOINTS], eff[BF_MAX_JOINTS];
    uint8_t wire[BF_WIRE_MAX(BF_MAX_JOINTS)];
    for (unsigned long seq = 0; seq < count; ++seq) {
        for (unsigned j = 0; j < joints; ++j) {
            pos[j] = 0.001f * (float)seq + (float)j;
            vel[j] = -0.5f * (float)j;
            eff[j] = 0.25f * (float)j;
        }
        uint8_t flags = (seq % 7u == 3u) ? BF_FLAG_FAULT : 0u;
        size_t n = bf_encode(wire, sizeof wire, (uint32_t)seq, 1000ull * seq + 17u, flags,
                             (uint8_t)joints, pos, vel, eff);
        if (n == 0 || fwrite(wire, 1, n, stdout) != n)
            return 1;
    }
    return fflush(stdout) == 0 ? 0 : 1;
}
