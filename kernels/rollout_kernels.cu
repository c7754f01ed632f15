// CUDA kernels for the rollout loop's between-engine work. The per-element
// arithmetic lives in rollout_kernels.cuh and is shared with the host build.
//
// Indices that change every step (the ring write index and the step index) are
// read from a device-resident int32 array `state` = {w, t}, so one captured CUDA
// graph replays every step unchanged: w is the next ring slot to write (which is
// also the slot after the newest, w_next, once the step has advanced) and t is
// the number of steps taken since the last fill.
//
// Element loops are grid-stride loops with 64-bit indices; any 1-D grid works.
#include "rollout_kernels.cuh"

#define SE_GRID_STRIDE(i, n)                                                             \
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n);        \
         i += (long long)blockDim.x * gridDim.x)

// Every slot of every batch item holds the start latent and a zero action; the
// linearised history (when hist_* are non-null) is set likewise; state = {0, 0}
// (when non-null).
extern "C" __global__ void se_ring_fill(float* ring_latents, float* ring_actions,
                                        float* hist_latents, float* hist_actions,
                                        const float* start_latent, int B, int S, int L, int A,
                                        int* state) {
    const long long n_lat = (long long)B * S * L;
    SE_GRID_STRIDE(i, n_lat) {
        const long long b = i / ((long long)S * L);
        const float v = start_latent[b * L + i % L];
        ring_latents[i] = v;
        if (hist_latents) hist_latents[i] = v;
    }
    const long long n_act = (long long)B * S * A;
    SE_GRID_STRIDE(j, n_act) {
        ring_actions[j] = 0.0f;
        if (hist_actions) hist_actions[j] = 0.0f;
    }
    if (state && blockIdx.x == 0 && threadIdx.x == 0) {
        state[0] = 0;
        state[1] = 0;
    }
}

// Writes slot w = state[0]: the new latent and the masked action. Does not
// advance w (se_ring_advance does, after every reader of w has run).
extern "C" __global__ void se_ring_push(float* ring_latents, float* ring_actions,
                                        const float* new_latent, const float* new_action,
                                        const se_u8* dof_mask, int B, int S, int L, int A,
                                        const int* state) {
    const int w = state[0];
    const long long n_lat = (long long)B * L;
    SE_GRID_STRIDE(i, n_lat) {
        const long long b = i / L;
        ring_latents[(b * S + w) * L + i % L] = new_latent[i];
    }
    const long long n_act = (long long)B * A;
    SE_GRID_STRIDE(j, n_act) {
        const long long b = j / A;
        const int a = (int)(j % A);
        ring_actions[(b * S + w) * A + a] = se_masked_action(new_action[j], dof_mask[a]);
    }
}

// hist[b, s] = ring[b, (w_next + s) % S] with w_next = state[0]: chronological
// order, oldest first, newest last.
extern "C" __global__ void se_ring_linearise(float* hist_latents, float* hist_actions,
                                             const float* ring_latents, const float* ring_actions,
                                             int B, int S, int L, int A, const int* state) {
    const int w_next = state[0];
    const long long n_lat = (long long)B * S * L;
    SE_GRID_STRIDE(i, n_lat) {
        const long long b = i / ((long long)S * L);
        const int s = (int)((i / L) % S);
        hist_latents[i] = ring_latents[(b * S + se_ring_slot(w_next, s, S)) * L + i % L];
    }
    const long long n_act = (long long)B * S * A;
    SE_GRID_STRIDE(j, n_act) {
        const long long b = j / ((long long)S * A);
        const int s = (int)((j / A) % S);
        hist_actions[j] = ring_actions[(b * S + se_ring_slot(w_next, s, S)) * A + j % A];
    }
}

// Push and linearise in one pass: writes slot w = state[0] and the history as it
// is after the push (w_next = (w + 1) % S). The thread writing the newest
// history entry (s = S - 1, the only one whose source is slot w) also writes the
// ring, so no thread reads what another writes. Does not advance w.
extern "C" __global__ void se_ring_push_linearise(float* ring_latents, float* ring_actions,
                                                  float* hist_latents, float* hist_actions,
                                                  const float* new_latent, const float* new_action,
                                                  const se_u8* dof_mask, int B, int S, int L, int A,
                                                  const int* state) {
    const int w = state[0];
    const int w_next = se_ring_next(w, S);
    const long long n_lat = (long long)B * S * L;
    SE_GRID_STRIDE(i, n_lat) {
        const long long b = i / ((long long)S * L);
        const int s = (int)((i / L) % S);
        const long long l = i % L;
        if (s == S - 1) {
            const float v = new_latent[b * L + l];
            ring_latents[(b * S + w) * L + l] = v;
            hist_latents[i] = v;
        } else {
            hist_latents[i] = ring_latents[(b * S + se_ring_slot(w_next, s, S)) * L + l];
        }
    }
    const long long n_act = (long long)B * S * A;
    SE_GRID_STRIDE(j, n_act) {
        const long long b = j / ((long long)S * A);
        const int s = (int)((j / A) % S);
        const int a = (int)(j % A);
        if (s == S - 1) {
            const float v = se_masked_action(new_action[b * A + a], dof_mask[a]);
            ring_actions[(b * S + w) * A + a] = v;
            hist_actions[j] = v;
        } else {
            hist_actions[j] = ring_actions[(b * S + se_ring_slot(w_next, s, S)) * A + a];
        }
    }
}

// state = {(w + 1) % S, t + 1}. Launch with one thread.
extern "C" __global__ void se_ring_advance(int* state, int S) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        state[0] = se_ring_next(state[0], S);
        state[1] = state[1] + 1;
    }
}

// action_out[b, a] = masked actions[b, t, a], t = state[1] clamped to [0, T-1].
extern "C" __global__ void se_select_action(float* action_out, const float* actions,
                                            const se_u8* dof_mask, int B, int T, int A,
                                            const int* state) {
    const int t = se_clamp_step(state[1], T);
    const long long n = (long long)B * A;
    SE_GRID_STRIDE(i, n) {
        const long long b = i / A;
        const int a = (int)(i % A);
        action_out[i] = se_masked_action(actions[(b * T + t) * A + a], dof_mask[a]);
    }
}

// Decoder output [B, 3, H, W] float (+ optional offset, same shape; null for
// plain decoding) to frames [B, H, W, 3] uint8. NaN pixels are written as 0 and
// counted into *nan_count (which is never reset here).
extern "C" __global__ void se_decode_frames(se_u8* frames, const float* x, const float* offset,
                                            int B, int H, int W, int* nan_count) {
    const long long hw = (long long)H * W;
    const long long n = (long long)B * hw;
    SE_GRID_STRIDE(i, n) {
        const long long b = i / hw;
        const long long p = i % hw;
        int nans = 0;
        for (int c = 0; c < 3; ++c) {
            const long long src = (b * 3 + c) * hw + p;
            int is_nan = 0;
            frames[i * 3 + c] = se_to_u8(x[src], offset ? offset[src] : 0.0f, &is_nan);
            nans += is_nan;
        }
        if (nans) atomicAdd(nan_count, nans);
    }
}

// Pre-check scores, one block per candidate b (grid = B, block = SE_REDUCE_THREADS).
// pred [B, H*W, 3], start [H*W, 3], keepout [H*W], goal [H*W, 3] or null.
// moved[b] = pixels inside keep-out whose largest channel change exceeds threshold;
// energy[b] = mean over keep-out pixels and channels of ((pred - start) / 255)^2;
// goal_mse[b] = mean over all pixels and channels of ((pred - goal) / 255)^2
// (not written when goal is null). Integer sums: deterministic for any order.
extern "C" __global__ void __launch_bounds__(SE_REDUCE_THREADS)
    se_precheck_scores(int* moved_out, float* energy_out, float* goal_mse_out,
                       const se_u8* pred, const se_u8* start, const se_u8* keepout,
                       const se_u8* goal, int B, int HW, int threshold) {
    __shared__ se_u64 s_energy[SE_REDUCE_THREADS];
    __shared__ se_u64 s_goal[SE_REDUCE_THREADS];
    __shared__ int s_moved[SE_REDUCE_THREADS];
    __shared__ int s_inside[SE_REDUCE_THREADS];
    const int b = blockIdx.x;
    if (b >= B) return;
    const int tid = threadIdx.x;
    const se_u8* p = pred + (long long)b * HW * 3;
    int moved = 0, inside = 0;
    se_u64 energy = 0, gsum = 0;
    for (int i = tid; i < HW; i += SE_REDUCE_THREADS) {
        const se_u8 k = keepout[i];
        inside += k ? 1 : 0;
        se_precheck_pixel(p + 3LL * i, start + 3LL * i, goal ? goal + 3LL * i : 0, k, threshold,
                          &moved, &energy, &gsum);
    }
    s_energy[tid] = energy;
    s_goal[tid] = gsum;
    s_moved[tid] = moved;
    s_inside[tid] = inside;
    __syncthreads();
    for (int half = SE_REDUCE_THREADS / 2; half > 0; half >>= 1) {
        if (tid < half) {
            s_energy[tid] += s_energy[tid + half];
            s_goal[tid] += s_goal[tid + half];
            s_moved[tid] += s_moved[tid + half];
            s_inside[tid] += s_inside[tid + half];
        }
        __syncthreads();
    }
    if (tid == 0) {
        moved_out[b] = s_moved[0];
        energy_out[b] = se_mean_sq_u8(s_energy[0], 3LL * s_inside[0]);
        if (goal) goal_mse_out[b] = se_mean_sq_u8(s_goal[0], 3LL * HW);
    }
}

// Predicted robot pixels inside keep-out, one block per candidate b (grid = B, block =
// SE_REDUCE_THREADS). mask float32 [B, H*W] (the decoder's robot_mask [B, 1, H, W]),
// keepout uint8 [H*W]. count[b] = pixels with mask >= 0.5 (NaN is not) and keepout
// nonzero. Integer sum: deterministic for any order.
extern "C" __global__ void __launch_bounds__(SE_REDUCE_THREADS)
    se_robot_in_keepout(int* count_out, const float* mask, const se_u8* keepout, int B,
                        int HW) {
    __shared__ int s_count[SE_REDUCE_THREADS];
    const int b = blockIdx.x;
    if (b >= B) return;
    const int tid = threadIdx.x;
    const float* m = mask + (long long)b * HW;
    int count = 0;
    for (int i = tid; i < HW; i += SE_REDUCE_THREADS)
        count += se_robot_keepout_pixel(m[i], keepout[i]);
    s_count[tid] = count;
    __syncthreads();
    for (int half = SE_REDUCE_THREADS / 2; half > 0; half >>= 1) {
        if (tid < half) s_count[tid] += s_count[tid + half];
        __syncthreads();
    }
    if (tid == 0) count_out[b] = s_count[0];
}

// dst[t] = src (nbytes bytes) with t = state[1] clamped to [0, T-1]: keeps one
// step's outputs in a per-horizon buffer without a host round trip.
extern "C" __global__ void se_store_step(unsigned char* dst, const unsigned char* src,
                                         long long nbytes, int T, const int* state) {
    const long long t = se_clamp_step(state[1], T);
    SE_GRID_STRIDE(i, nbytes) { dst[t * nbytes + i] = src[i]; }
}
