// Per-element bodies of the rollout kernels, shared by the CUDA kernels
// (rollout_kernels.cu) and the host build used by the tests (host_kernels.cpp).
//
// Every function here is pure: it computes one element (or one pixel) from its
// inputs. Loops, thread indexing and reductions live in the callers. The
// arithmetic is written so that the device and the host give identical bits:
//   * float additions and multiplications that feed a rounding decision use
//     se_add_rn / se_mul_rn (__fadd_rn / __fmul_rn on the device, which are never
//     contracted into FMAs; plain operators on the host, built with
//     -ffp-contract=off);
//   * reductions accumulate integers (exact, so order does not matter), and the
//     final mean is one IEEE double division rounded once to float32.
//
// Contracts (see docs/kernels.md):
//   latents float32 [B, S, L]; actions float32 [B, S, A]; DoF mask uint8 [A]
//   (nonzero = controllable); frames uint8 [B, H, W, 3] (HWC, RGB); robot mask float32
//   [B, 1, H, W] (0..1); keep-out mask uint8 [H, W] (nonzero = inside).
#pragma once

#if defined(__CUDACC__)
#define SE_HD __host__ __device__ __forceinline__
#else
#define SE_HD static inline
#endif

#if defined(__CUDACC_RTC__)
typedef unsigned char se_u8;
typedef unsigned long long se_u64;
#else
#include <stdint.h>
typedef uint8_t se_u8;
typedef unsigned long long se_u64;
#endif

// Threads per block of the per-candidate reduction kernels (se_precheck_scores,
// se_robot_in_keepout).
#define SE_REDUCE_THREADS 256

// Exact float32 add / multiply (round to nearest even, never fused).
SE_HD float se_add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}

SE_HD float se_mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}

SE_HD int se_isnan(float x) { return x != x; }

// ---------------------------------------------------------------- ring buffer

// Action value stored in the ring: masked (uncontrollable) channels become
// exactly +0.0, whatever the input (NaN and -0.0 included).
SE_HD float se_masked_action(float action, se_u8 mask) { return mask ? action : 0.0f; }

// Ring slot holding chronological position s (0 = oldest, S-1 = newest) when the
// next write index is w_next. Requires 0 <= w_next < S and 0 <= s < S.
SE_HD int se_ring_slot(int w_next, int s, int S) {
    int slot = w_next + s;
    return slot >= S ? slot - S : slot;
}

// Write index after writing slot w.
SE_HD int se_ring_next(int w, int S) { return w + 1 >= S ? 0 : w + 1; }

// Step index clamped into [0, T-1] (T >= 1).
SE_HD int se_clamp_step(int t, int T) { return t < 0 ? 0 : (t >= T ? T - 1 : t); }

// ------------------------------------------------------------- frame decoding

// One channel value of a decoded frame: v = x + offset; NaN -> 0 and *is_nan = 1;
// clip to [0, 1]; u8 = floor(v * 255 + 0.5) evaluated exactly on the float32
// product t = v * 255 (round half up; the + 0.5 is never rounded).
SE_HD se_u8 se_to_u8(float x, float offset, int* is_nan) {
    float v = se_add_rn(x, offset);
    if (se_isnan(v)) {
        *is_nan = 1;
        return 0;
    }
    v = v < 0.0f ? 0.0f : (v > 1.0f ? 1.0f : v);
    float t = se_mul_rn(v, 255.0f);
    int r = (int)t;  // t >= 0, so truncation is floor
    float frac = t - (float)r;  // exact: r and t share the exponent range
    return (se_u8)(frac >= 0.5f ? r + 1 : r);
}

// ----------------------------------------------------------- pre-check scores

SE_HD int se_absdiff_u8(se_u8 a, se_u8 b) { return a > b ? (int)a - (int)b : (int)b - (int)a; }

// Accumulates one pixel of one candidate. pred, start, goal point at the pixel's
// 3 channels; goal may be null. keepout is the pixel's mask value (nonzero =
// inside). threshold is in 0..255 units: the pixel moved if the largest channel
// difference exceeds it.
SE_HD void se_precheck_pixel(const se_u8* pred, const se_u8* start, const se_u8* goal,
                             se_u8 keepout, int threshold, int* moved, se_u64* energy_sq,
                             se_u64* goal_sq) {
    if (keepout) {
        int d0 = se_absdiff_u8(pred[0], start[0]);
        int d1 = se_absdiff_u8(pred[1], start[1]);
        int d2 = se_absdiff_u8(pred[2], start[2]);
        int dmax = d0 > d1 ? d0 : d1;
        dmax = dmax > d2 ? dmax : d2;
        *moved += dmax > threshold ? 1 : 0;
        *energy_sq += (se_u64)(d0 * d0 + d1 * d1 + d2 * d2);
    }
    if (goal) {
        int g0 = se_absdiff_u8(pred[0], goal[0]);
        int g1 = se_absdiff_u8(pred[1], goal[1]);
        int g2 = se_absdiff_u8(pred[2], goal[2]);
        *goal_sq += (se_u64)(g0 * g0 + g1 * g1 + g2 * g2);
    }
}

// Mean of ((a - b) / 255)^2 from the exact integer sum of (a - b)^2 over n_values
// values: one double division (exact operands while sum < 2^53), rounded once to
// float32. Returns 0 for n_values == 0.
SE_HD float se_mean_sq_u8(se_u64 sum_sq, long long n_values) {
    if (n_values <= 0) return 0.0f;
    return (float)((double)sum_sq / (65025.0 * (double)n_values));
}

// ------------------------------------------------------- robot in keep-out

// 1 if a pixel is predicted robot and inside the keep-out mask, else 0. The pixel is
// robot where the decoder's mask value is >= 0.5 (a plain float comparison: exactly 0.5
// is robot, the next float below is not, NaN is not); inside where keepout is nonzero.
SE_HD int se_robot_keepout_pixel(float mask, se_u8 keepout) {
    return (keepout && mask >= 0.5f) ? 1 : 0;
}
