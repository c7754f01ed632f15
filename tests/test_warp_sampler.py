"""The gather form of the warp (``export.models.warp.bilinear_sample``) equals
``F.grid_sample`` (bilinear, border padding, ``align_corners=False``): on random grids,
outside the image, at integer positions, on the border, at +-inf and NaN; in eager PyTorch
and in its exported ONNX graph under ONNX Runtime; the decoder keeps ``grid_sample`` unless
told, and the shipped checkpoint's decoder gives the same frames with either sampler."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the warp model needs torch")
F = torch.nn.functional

from export.models.warp import (  # noqa: E402
    SAMPLERS,
    WarpConfig,
    WarpDecoder,
    bilinear_sample,
    identity_grid,
    warp_composite,
)

ROOT = Path(__file__).resolve().parent.parent
CHECKPOINTS = ROOT / "models" / "reference-checkpoints"
TOL = 1e-6  # float32, values in [0, 1]


def _grid_sample(image, grid):
    """``grid_sample`` at each of the G channels-first grids ``[B, G, 2, Ho, Wo]``."""
    return torch.stack([F.grid_sample(image, grid[:, g].permute(0, 2, 3, 1), mode="bilinear",
                                      padding_mode="border", align_corners=False)
                        for g in range(grid.shape[1])], 1)


def _pixel_grid(x, y, h, w):
    """Normalised grid ``[B, G, 2, Ho, Wo]`` of pixel positions (pixel centre i at i)."""
    return torch.stack([(2 * x + 1) / w - 1, (2 * y + 1) / h - 1], 2)


@pytest.mark.parametrize("shape", [(3, 4, 7, 5), (2, 1, 64, 64), (1, 3, 1, 6)])
def test_random_grids_inside_and_outside_the_image_equal_grid_sample(shape):
    g = torch.Generator().manual_seed(0)
    b, c, h, w = shape
    image = torch.rand(shape, generator=g)
    grid = torch.rand(b, 2, 2, 9, 11, generator=g) * 3.0 - 1.5  # a third outside
    out = bilinear_sample(image, grid)
    assert out.shape == (b, 2, c, 9, 11) and out.dtype == torch.float32
    assert (out - _grid_sample(image, grid)).abs().max().item() <= TOL


def test_integer_positions_give_the_pixels_exactly():
    # power-of-two sizes: the normalised pixel centres are exact in float32
    g = torch.Generator().manual_seed(1)
    image = torch.rand(2, 3, 4, 8, generator=g)
    x = torch.randint(-3, 11, (2, 1, 5, 8), generator=g).float()
    y = torch.randint(-3, 7, (2, 1, 5, 8), generator=g).float()
    out = bilinear_sample(image, _pixel_grid(x, y, 4, 8))
    xi, yi = x.clamp(0, 7).long(), y.clamp(0, 3).long()
    want = torch.stack([image[b][:, yi[b, 0], xi[b, 0]] for b in range(2)])
    assert torch.equal(out[:, 0], want)
    assert torch.equal(out, _grid_sample(image, _pixel_grid(x, y, 4, 8)))


def test_the_border_and_infinite_positions_take_the_border_pixels():
    g = torch.Generator().manual_seed(2)
    image = torch.rand(1, 2, 8, 4, generator=g)
    inf = float("inf")
    # last pixel centre exactly, just inside it, the outer edge, beyond it, and +-inf
    xs = torch.tensor([3.0, 2.999, 3.5, 7.25, inf, -inf, -0.5, -0.001, 0.0, 1.5])
    ys = torch.tensor([7.0, 6.999, 7.5, -2.0, -inf, inf, 7.0, 9.0, 0.0, 2.25])
    grid = _pixel_grid(xs.reshape(1, 1, 1, -1), ys.reshape(1, 1, 1, -1), 8, 4)
    out = bilinear_sample(image, grid)
    assert torch.isfinite(out).all()
    assert (out - _grid_sample(image, grid)).abs().max().item() <= TOL
    assert torch.equal(out[0, 0, :, 0, 4], image[0, :, 0, 3])  # x +inf, y -inf: top right
    assert torch.equal(out[0, 0, :, 0, 0], image[0, :, 7, 3])  # the last pixel centre


def test_a_nan_position_samples_the_first_column_and_never_fails():
    image = torch.rand(1, 3, 4, 4, generator=torch.Generator().manual_seed(3))
    grid = torch.zeros(1, 1, 2, 1, 2)
    grid[0, 0, 0, 0, 0] = float("nan")  # x NaN, y at the centre line
    grid[0, 0, :, 0, 1] = float("nan")
    out = bilinear_sample(image, grid)
    assert torch.isfinite(out).all()
    assert torch.allclose(out[0, 0, :, 0, 0], 0.5 * (image[0, :, 1, 0] + image[0, :, 2, 0]))
    assert torch.equal(out[0, 0, :, 0, 1], image[0, :, 0, 0])


def test_wrong_shapes_are_refused():
    with pytest.raises(ValueError, match=r"grid \[B, G, 2, Ho, Wo\]"):
        bilinear_sample(torch.zeros(1, 3, 4, 4), torch.zeros(1, 4, 4, 2))
    with pytest.raises(ValueError, match="expected image"):
        bilinear_sample(torch.zeros(2, 3, 4, 4), torch.zeros(1, 1, 2, 4, 4))


def _composite_inputs(b: int, flow_px: float, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(b, 3, 64, 64, generator=g), torch.rand(b, 1, 64, 64, generator=g),
            torch.randn(b, 4, 64, 64, generator=g) * flow_px,
            torch.rand(b, 1, 64, 64, generator=g))


@pytest.mark.parametrize("flow_px", [0.0, 3.0, 40.0])
def test_the_composite_is_the_same_with_either_sampler(flow_px):
    base = identity_grid(64)
    image, mask, flows, o = _composite_inputs(2, flow_px)
    ref = warp_composite(image, mask, flows, o, base, "grid_sample")
    out = warp_composite(image, mask, flows, o, base, "gather")
    for a, r in zip(out, ref, strict=True):
        assert a.shape == r.shape
        assert (a - r).abs().max().item() <= TOL
    if flow_px == 0.0:  # zero flow: both warps give the start frame and mask exactly
        assert torch.equal(out[0], (1.0 - o) * image + o * image)
        assert torch.equal(out[1], (1.0 - o) * mask)
    with pytest.raises(ValueError, match="warp sampler 'nearest'"):
        warp_composite(image, mask, flows, o, base, "nearest")


def test_the_exported_gather_graph_equals_grid_sample_in_onnx_runtime(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    onnx = pytest.importorskip("onnx")
    from edge.runtime.backends.ort import OrtCpuRunner
    from export.engine.ops import check_onnx
    from export.variants.onnx_export import OPSET

    class Composite(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("base", identity_grid(64), persistent=False)

        def forward(self, image, mask, flows, o):
            return warp_composite(image, mask, flows, o, self.base, "gather")

    ins = _composite_inputs(2, 3.0)
    path = tmp_path / "warp.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Composite().eval(), ins, str(path), dynamo=False,
                          opset_version=OPSET, input_names=["image", "mask", "flows", "o"],
                          output_names=["frames", "robot_mask"], do_constant_folding=True)
    ops = {n.op_type for n in onnx.load(str(path)).graph.node}
    assert "GatherElements" in ops and "GridSample" not in ops
    assert check_onnx(path, "warp.onnx") == []  # every operator in TensorRT 10.3 and 11
    sess = ort.InferenceSession(str(path), OrtCpuRunner(path, 1).session_options(),
                                providers=["CPUExecutionProvider"])
    flows = ins[2].clone()
    flows[0, 0, 3, 3] = float("nan")  # ONNX Runtime must not fail on an out-of-range index
    flows[1, 1, 5, 5] = float("inf")
    feeds = dict(zip(["image", "mask", "flows", "o"],
                     [t.numpy() for t in (ins[0], ins[1], flows, ins[3])], strict=True))
    got = sess.run(None, feeds)
    ref = warp_composite(ins[0], ins[1], flows, ins[3], identity_grid(64), "grid_sample")
    for a, r in zip(got, ref, strict=True):
        finite = np.isfinite(flows.numpy()).all(1, keepdims=True)[:, :, :, :]
        diff = np.abs(a - r.numpy()) * finite  # the NaN pixel may differ from grid_sample
        assert np.isfinite(a).all() and diff.max() <= TOL


def test_the_decoder_keeps_grid_sample_unless_told_and_refuses_unknown_samplers():
    cfg = WarpConfig()
    assert WarpDecoder(cfg).sampler == "grid_sample" and SAMPLERS == ("grid_sample", "gather")
    assert set(WarpDecoder(cfg, "gather").state_dict()) == set(WarpDecoder(cfg).state_dict())
    with pytest.raises(ValueError, match="warp sampler 'bicubic'"):
        WarpDecoder(cfg, "bicubic")


def test_the_shipped_decoder_gives_the_same_frames_with_either_sampler():
    if not (CHECKPOINTS / "warp.pt").is_file():
        pytest.skip("no shipped checkpoint")
    from edge.episode import load_episode
    from export.variants.warp_export import load_warp_model

    model = load_warp_model(CHECKPOINTS)
    frames = load_episode(ROOT / "samples" / "cell_sample" / "test.npz").frames[:4]
    with torch.inference_mode():
        z = model.encoder(torch.from_numpy(np.ascontiguousarray(frames)).permute(0, 3, 1, 2))
        # moved states: the motion block of a state from real actions
        z = z.clone()
        a, b = model.cfg.layout.ranges["motion"]
        z[:, a:b] = torch.randn(z[:, a:b].shape, generator=torch.Generator().manual_seed(0))
        ref = model.decoder.flows(z)
        model.decoder.sampler = "gather"
        out = model.decoder.flows(z)
    assert ref["flow"].abs().max() > 0.5  # the flows move pixels
    for key in ("frames", "mask"):
        assert (out[key] - ref[key]).abs().max().item() <= TOL
