// Host build of the rollout kernels: the same per-element bodies as the CUDA
// kernels (rollout_kernels.cuh), run in plain loops. The tests compile it with
//   g++ -O2 -std=c++17 -ffp-contract=off -shared -fPIC
// and compare it with the NumPy reference (kernels/reference.py) bit for bit.
// The ring functions take the indices w / w_next / t as arguments where the
// device kernels read them from the device-resident state array.
#include "rollout_kernels.cuh"

extern "C" {

void se_host_ring_fill(float* ring_latents, float* ring_actions, const float* start_latent, int B,
                       int S, int L, int A) {
    for (long long b = 0; b < B; ++b)
        for (int s = 0; s < S; ++s) {
            for (int l = 0; l < L; ++l) ring_latents[(b * S + s) * L + l] = start_latent[b * L + l];
            for (int a = 0; a < A; ++a) ring_actions[(b * S + s) * A + a] = 0.0f;
        }
}

int se_host_ring_push(float* ring_latents, float* ring_actions, int w, const float* new_latent,
                      const float* new_action, const se_u8* dof_mask, int B, int S, int L, int A) {
    for (long long b = 0; b < B; ++b) {
        for (int l = 0; l < L; ++l) ring_latents[(b * S + w) * L + l] = new_latent[b * L + l];
        for (int a = 0; a < A; ++a)
            ring_actions[(b * S + w) * A + a] = se_masked_action(new_action[b * A + a], dof_mask[a]);
    }
    return se_ring_next(w, S);
}

void se_host_ring_linearise(float* hist_latents, float* hist_actions, const float* ring_latents,
                            const float* ring_actions, int w_next, int B, int S, int L, int A) {
    for (long long b = 0; b < B; ++b)
        for (int s = 0; s < S; ++s) {
            const int slot = se_ring_slot(w_next, s, S);
            for (int l = 0; l < L; ++l)
                hist_latents[(b * S + s) * L + l] = ring_latents[(b * S + slot) * L + l];
            for (int a = 0; a < A; ++a)
                hist_actions[(b * S + s) * A + a] = ring_actions[(b * S + slot) * A + a];
        }
}

// Mirrors se_ring_push_linearise (the s == S - 1 branch writes the ring too).
int se_host_ring_push_linearise(float* ring_latents, float* ring_actions, float* hist_latents,
                                float* hist_actions, int w, const float* new_latent,
                                const float* new_action, const se_u8* dof_mask, int B, int S,
                                int L, int A) {
    const int w_next = se_ring_next(w, S);
    for (long long b = 0; b < B; ++b)
        for (int s = 0; s < S; ++s) {
            const int slot = se_ring_slot(w_next, s, S);
            for (int l = 0; l < L; ++l) {
                if (s == S - 1) {
                    const float v = new_latent[b * L + l];
                    ring_latents[(b * S + w) * L + l] = v;
                    hist_latents[(b * S + s) * L + l] = v;
                } else {
                    hist_latents[(b * S + s) * L + l] = ring_latents[(b * S + slot) * L + l];
                }
            }
            for (int a = 0; a < A; ++a) {
                if (s == S - 1) {
                    const float v = se_masked_action(new_action[b * A + a], dof_mask[a]);
                    ring_actions[(b * S + w) * A + a] = v;
                    hist_actions[(b * S + s) * A + a] = v;
                } else {
                    hist_actions[(b * S + s) * A + a] = ring_actions[(b * S + slot) * A + a];
                }
            }
        }
    return w_next;
}

void se_host_select_action(float* action_out, const float* actions, const se_u8* dof_mask, int t,
                           int B, int T, int A) {
    const int tc = se_clamp_step(t, T);
    for (long long b = 0; b < B; ++b)
        for (int a = 0; a < A; ++a)
            action_out[b * A + a] = se_masked_action(actions[(b * T + tc) * A + a], dof_mask[a]);
}

// Returns the number of NaN values met (the device kernel adds it to a counter).
int se_host_decode_frames(se_u8* frames, const float* x, const float* offset, int B, int H, int W) {
    const long long hw = (long long)H * W;
    int nans = 0;
    for (long long b = 0; b < B; ++b)
        for (long long p = 0; p < hw; ++p)
            for (int c = 0; c < 3; ++c) {
                const long long src = (b * 3 + c) * hw + p;
                int is_nan = 0;
                frames[(b * hw + p) * 3 + c] = se_to_u8(x[src], offset ? offset[src] : 0.0f, &is_nan);
                nans += is_nan;
            }
    return nans;
}

void se_host_precheck_scores(int* moved_out, float* energy_out, float* goal_mse_out,
                             const se_u8* pred, const se_u8* start, const se_u8* keepout,
                             const se_u8* goal, int B, int HW, int threshold) {
    for (long long b = 0; b < B; ++b) {
        const se_u8* p = pred + b * HW * 3;
        int moved = 0;
        long long inside = 0;
        se_u64 energy = 0, gsum = 0;
        for (long long i = 0; i < HW; ++i) {
            inside += keepout[i] ? 1 : 0;
            se_precheck_pixel(p + 3 * i, start + 3 * i, goal ? goal + 3 * i : nullptr, keepout[i],
                              threshold, &moved, &energy, &gsum);
        }
        moved_out[b] = moved;
        energy_out[b] = se_mean_sq_u8(energy, 3 * inside);
        if (goal) goal_mse_out[b] = se_mean_sq_u8(gsum, 3LL * HW);
    }
}

void se_host_robot_in_keepout(int* count_out, const float* mask, const se_u8* keepout, int B,
                              int HW) {
    for (long long b = 0; b < B; ++b) {
        const float* m = mask + b * HW;
        int count = 0;
        for (long long i = 0; i < HW; ++i) count += se_robot_keepout_pixel(m[i], keepout[i]);
        count_out[b] = count;
    }
}

}  // extern "C"
