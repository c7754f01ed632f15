/* Two demonstrations of bridge_frame.h, with output a test can predict.
 *
 * bridge_frame_demo COUNT JOINTS: writes `count` frames of `joints` joints to stdout:
 *   position[j] = 0.001*seq + j, velocity[j] = -0.5*j, effort[j] = 0.25*j,
 *   device time = 1000*seq + 17 us, fault flag on every seq with seq % 7 == 3.
 *
 * bridge_frame_demo pong: reads host-to-device bytes from stdin until EOF and answers every
 * valid ping on stdout, as firmware would: device receipt time 1000*seq + 5 us, sending
 * time 4 us later, no fault. Noise, corrupt pings and other frames are not answered. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bridge_frame.h"

static int answer_pings(void)
{
    bf_rx rx;
    uint8_t wire[BF_PONG_WIRE_MAX];
    bf_rx_init(&rx);
    int c;
    while ((c = getchar()) != EOF) {
        uint32_t seq;
        uint64_t host_us;
        if (!bf_rx_byte(&rx, (uint8_t)c, &seq, &host_us))
            continue;
        uint64_t rx_us = 1000ull * seq + 5u; /* firmware: its clock at the ping's last byte */
        size_t n = bf_encode_pong(wire, sizeof wire, seq, rx_us, rx_us + 4u, host_us, 0u);
        if (n == 0 || fwrite(wire, 1, n, stdout) != n)
            return 1;
    }
    return fflush(stdout) == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "pong") == 0)
        return answer_pings();
    if (argc != 3) {
        fprintf(stderr, "usage: %s COUNT JOINTS | %s pong\n", argv[0], argv[0]);
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
