"""The FLOP counter behind the CPU benchmark's fraction-of-peak figures."""

from __future__ import annotations

from bench.bench_cpu_rollout import count_flops


def test_conv_einsum_matmul_flops() -> None:
    # 2 * N * Cout * Ho * Wo * Cin/group * kh * kw
    assert count_flops("Conv", [[2, 6, 8, 8], [4, 3, 3, 3]], [[2, 4, 8, 8]]) == 2 * 2 * 4 * 64 * 27
    assert count_flops("Einsum", [[16, 7], [16, 7, 32, 16, 16]], [[16, 32, 16, 16]],
                       {"equation": "ba,badhw->bdhw"}) == 2 * 16 * 7 * 32 * 256
    assert count_flops("MatMul", [[5, 3], [3, 4]], [[5, 4]]) == 2 * 5 * 4 * 3
    assert count_flops("Relu", [[5, 3]], [[5, 3]]) == 0
