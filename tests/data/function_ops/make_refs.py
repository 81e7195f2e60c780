#!/usr/bin/env python3
"""Writes the reference cases of tests/function_ops_test.cc: small models of the ONNX ops
ampc expands at import (Attention, RMSNormalization, GroupNormalization,
InstanceNormalization, ConvTranspose, Resize, GridSample, ...) with their inputs and expected
outputs.

Each case is <name>.onnx and <name>.npz (the inputs by name, and `output.<name>` for each
output). The expected outputs are onnx's reference evaluator's; where PyTorch computes the
same thing (scaled_dot_product_attention, rms_norm) they are checked against it first, so the
references do not rest on one implementation. Needs onnx (>= 1.18), numpy and torch from PyPI:

    venv/bin/python tests/data/function_ops/make_refs.py
"""

import os

import numpy as np
import onnx
import onnx.helper as h
import onnx.numpy_helper
import onnx.reference
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(7)
F32, F16, BOOL = onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BOOL


def normal(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def write(name, op, inputs, outputs, attrs, torch_check=None, opset=23, constants=(),
          torch_only=False, reference=None):
    """inputs: [(name, array)] ('' for an omitted optional input); outputs: names; constants:
    the inputs that are initializers (Resize's scales and sizes must be known when compiling);
    torch_only: PyTorch is the reference (onnx's evaluator cannot run the case); reference: a
    function of the inputs (numpy, by name) giving the output from ONNX's definition, where
    onnx's evaluator does not follow it (LRN's loops over the batch, not the channels; Hardmax
    before opset 13 is not coerced to 2-D; Mean does not broadcast; GlobalMaxPool of 3 spatial
    axes gives another rank)."""
    feeds = {n: a for n, a in inputs if n}
    infos = [h.make_tensor_value_info(n, onnx.helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
             for n, a in inputs if n and n not in constants]
    inits = [onnx.numpy_helper.from_array(a, n) for n, a in inputs if n in constants]
    node = h.make_node(op, [n for n, _ in inputs], outputs, name=name, **attrs)
    out_infos = [h.make_tensor_value_info(n, onnx.TensorProto.UNDEFINED, None) for n in outputs if n]
    graph = h.make_graph([node], name, infos, out_infos, initializer=inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)], ir_version=10)
    if reference is not None:
        results = [reference(feeds)]
    elif torch_only:
        results = [torch_check({n: torch.from_numpy(a) for n, a in feeds.items()}).numpy()]
    else:
        results = onnx.reference.ReferenceEvaluator(model).run(None, feeds)
    # Declare the outputs' types and shapes, as an exporter does.
    model.graph.ClearField("output")
    for n, r in zip([o for o in outputs if o], results):
        model.graph.output.append(
            h.make_tensor_value_info(n, onnx.helper.np_dtype_to_tensor_dtype(r.dtype), r.shape))
    if opset >= 21 or op != "GroupNormalization":  # newer checkers reject the deprecated 18
        onnx.checker.check_model(model, full_check=True)
    if torch_check is not None:
        want = torch_check({n: torch.from_numpy(a) for n, a in feeds.items()})
        np.testing.assert_allclose(results[0], want.numpy(), rtol=1e-5, atol=1e-6,
                                   err_msg=f"{name}: onnx's reference and PyTorch differ")
    onnx.save(model, os.path.join(HERE, f"{name}.onnx"))
    arrays = {n: a for n, a in feeds.items() if n not in constants}
    for n, r in zip([o for o in outputs if o], results):
        arrays[f"output.{n}"] = r
    np.savez(os.path.join(HERE, f"{name}.npz"), **arrays)
    print(name, [r.shape for r in results])


def main():
    b, heads, s, d = 2, 4, 5, 4
    q, k, v = normal(b, heads, s, d), normal(b, heads, s, d), normal(b, heads, s, d)
    write("attention_causal", "Attention", [("Q", q), ("K", k), ("V", v)], ["Y"],
          dict(is_causal=1),
          lambda t: F.scaled_dot_product_attention(t["Q"], t["K"], t["V"], is_causal=True))

    # Grouped-query attention on 3-D inputs: 4 query heads over 2 key/value heads.
    q3, k3, v3 = normal(b, s, 4 * d), normal(b, s, 2 * d), normal(b, s, 2 * d)

    def gqa(t):
        split = lambda x, n: x.view(b, s, n, d).transpose(1, 2)
        y = F.scaled_dot_product_attention(split(t["Q"], 4), split(t["K"], 2), split(t["V"], 2),
                                           enable_gqa=True)
        return y.transpose(1, 2).reshape(b, s, 4 * d)
    write("attention_gqa_3d", "Attention", [("Q", q3), ("K", k3), ("V", v3)], ["Y"],
          dict(q_num_heads=4, kv_num_heads=2), gqa)

    # A boolean mask with one query row that sees no key: that row is zero.
    mask = rng.random((b, 1, s, s)) < 0.7
    mask[:, :, :, 0] = True
    mask[1, 0, 2, :] = False
    write("attention_bool_mask", "Attention", [("Q", q), ("K", k), ("V", v), ("attn_mask", mask)],
          ["Y"], {})

    # A float mask, an explicit scale and a softcap, with cross attention (3 keys).
    kc, vc = normal(b, heads, 3, d), normal(b, heads, 3, d)
    write("attention_float_mask_softcap", "Attention",
          [("Q", q), ("K", kc), ("V", vc), ("attn_mask", normal(1, heads, s, 3))], ["Y"],
          dict(scale=0.3, softcap=2.0))

    # Cached keys and values: 3 past positions, 2 new queries, causal from the cache's end.
    pk, pv = normal(b, heads, 3, d), normal(b, heads, 3, d)
    q2, k2, v2 = normal(b, heads, 2, d), normal(b, heads, 2, d), normal(b, heads, 2, d)
    write("attention_past_causal", "Attention",
          [("Q", q2), ("K", k2), ("V", v2), ("", None), ("past_key", pk), ("past_value", pv)],
          ["Y", "present_key", "present_value"], dict(is_causal=1))

    x = normal(2, 3, 8)
    write("rms_normalization", "RMSNormalization", [("X", x), ("scale", normal(8))], ["Y"], {},
          lambda t: F.rms_norm(t["X"], (8,), t["scale"], eps=1e-5))
    write("rms_normalization_axis", "RMSNormalization",
          [("X", x), ("scale", normal(3, 8))], ["Y"], dict(axis=-2, epsilon=1e-3),
          lambda t: F.rms_norm(t["X"], (3, 8), t["scale"], eps=1e-3))
    write("rms_normalization_f16", "RMSNormalization",
          [("X", normal(2, 3, 8, dtype=np.float16)), ("scale", normal(8, dtype=np.float16))],
          ["Y"], dict(stash_type=1))


def normalizations():
    x = normal(2, 6, 3, 4)
    scale, bias = normal(6), normal(6)
    write("instance_normalization", "InstanceNormalization",
          [("X", x), ("scale", scale), ("B", bias)], ["Y"], dict(epsilon=1e-4),
          lambda t: F.instance_norm(t["X"], weight=t["scale"], bias=t["B"], eps=1e-4))
    write("group_normalization", "GroupNormalization",
          [("X", x), ("scale", scale), ("bias", bias)], ["Y"], dict(num_groups=3, epsilon=1e-4),
          lambda t: F.group_norm(t["X"], 3, t["scale"], t["bias"], eps=1e-4))
    # Opset 18: one scale and bias per group.
    write("group_normalization_opset18", "GroupNormalization",
          [("X", x), ("scale", normal(2)), ("bias", normal(2))], ["Y"], dict(num_groups=2),
          opset=18)


def spatial():
    """ConvTranspose and Resize, which ampc lowers onto ConvGradData and Gather/Mul/Add."""
    x = normal(2, 4, 3, 3)
    w, b = normal(4, 3, 3, 3), normal(6)
    write("conv_transpose_grouped", "ConvTranspose", [("X", x), ("W", w), ("B", b)], ["Y"],
          dict(group=2, strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1]),
          lambda t: F.conv_transpose2d(t["X"], t["W"], t["B"], stride=2, padding=1,
                                       output_padding=1, groups=2), opset=17,
          torch_only=True)  # onnx's evaluator cannot run grouped ConvTranspose
    # output_shape past the full transposed convolution (extent 3 * 3 + 5 = 14): ONNX's rule
    # gives pads -1 and -2, zeros before and after.
    write("conv_transpose_1d_output_shape", "ConvTranspose",
          [("X", normal(1, 2, 4)), ("W", normal(2, 3, 3))], ["Y"],
          dict(strides=[3], dilations=[2], output_shape=[17]),
          lambda t: F.pad(F.conv_transpose1d(t["X"], t["W"], stride=3, dilation=2), (1, 2)),
          opset=17, torch_only=True)  # onnx's evaluator rejects negative pads

    img = normal(1, 2, 3, 5)
    resize = lambda *vals: np.array(vals, dtype=np.float32)
    sizes = lambda *vals: np.array(vals, dtype=np.int64)
    write("resize_linear_pytorch_half_pixel", "Resize",
          [("X", img), ("", None), ("scales", resize(1, 1, 2, 1.6))], ["Y"],
          dict(mode="linear", coordinate_transformation_mode="pytorch_half_pixel"),
          lambda t: F.interpolate(t["X"], scale_factor=(2, 1.6), mode="bilinear",
                                  align_corners=False), opset=17, constants=("scales",))
    write("resize_linear_align_corners_sizes", "Resize",
          [("X", img), ("", None), ("", None), ("sizes", sizes(1, 2, 7, 9))], ["Y"],
          dict(mode="linear", coordinate_transformation_mode="align_corners"),
          lambda t: F.interpolate(t["X"], size=(7, 9), mode="bilinear", align_corners=True),
          opset=17, constants=("sizes",))
    write("resize_nearest_floor_sizes", "Resize",
          [("X", img), ("", None), ("", None), ("sizes", sizes(1, 2, 5, 7))], ["Y"],
          dict(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
          lambda t: F.interpolate(t["X"], size=(5, 7), mode="nearest"), opset=17,
          constants=("sizes",))
    write("resize_cubic_pytorch", "Resize",
          [("X", img), ("", None), ("scales", resize(1, 1, 2, 2))], ["Y"],
          dict(mode="cubic", coordinate_transformation_mode="pytorch_half_pixel"),
          lambda t: F.interpolate(t["X"], scale_factor=2, mode="bicubic", align_corners=False),
          opset=17, constants=("scales",))
    big = normal(1, 2, 8, 10)
    write("resize_linear_antialias", "Resize",
          [("X", big), ("", None), ("", None), ("sizes", sizes(3, 4))], ["Y"],
          dict(mode="linear", antialias=1, axes=[2, 3], exclude_outside=1),
          lambda t: F.interpolate(t["X"], size=(3, 4), mode="bilinear", antialias=True,
                                  align_corners=False), opset=18, constants=("sizes",))
    write("resize_nearest_not_larger", "Resize",
          [("X", img), ("", None), ("", None), ("sizes", sizes(7, 8))], ["Y"],
          dict(mode="nearest", axes=[2, 3], keep_aspect_ratio_policy="not_larger"), opset=18,
          constants=("sizes",))
    write("resize_linear_half_pixel_symmetric", "Resize",
          [("X", img), ("", None), ("scales", resize(1, 1, 1.7, 0.7))], ["Y"],
          dict(mode="linear", coordinate_transformation_mode="half_pixel_symmetric"), opset=19,
          constants=("scales",))


def rotary(x, cos, sin, interleaved=False):
    """PyTorch's rotation of the pairs (halves, or neighbours when interleaved) of x's last
    axis, cos and sin broadcast over heads."""
    if interleaved:
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.stack((cos * x1 - sin * x2, sin * x1 + cos * x2), dim=-1).flatten(-2)
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


def more_ops():
    """LpNormalization and RotaryEmbedding (opset 23), which ampc expands at import."""
    x = normal(3, 4, 5)
    write("lp_normalization_l2", "LpNormalization", [("X", x)], ["Y"], dict(axis=1),
          lambda t: F.normalize(t["X"], p=2.0, dim=1, eps=0.0), opset=17)
    # onnx's evaluator sums x, not |x|, for p = 1: PyTorch is the reference.
    write("lp_normalization_l1", "LpNormalization", [("X", x)], ["Y"], dict(axis=-1, p=1),
          lambda t: F.normalize(t["X"], p=1.0, dim=-1, eps=0.0), opset=17, torch_only=True)
    # A slice of zeros normalizes to zeros (onnx's evaluator; PyTorch's eps does the same).
    z = x.copy()
    z[1, :, 2] = 0
    write("lp_normalization_zero_slice", "LpNormalization", [("X", z)], ["Y"], dict(axis=1),
          lambda t: F.normalize(t["X"], p=2.0, dim=1, eps=1e-30), opset=17)

    batch, heads, seq, head = 2, 3, 5, 8
    angles = rng.uniform(-3, 3, size=(batch, seq, head // 2)).astype(np.float32)
    cos, sin = np.cos(angles), np.sin(angles)
    q = normal(batch, heads, seq, head)
    write("rotary_embedding", "RotaryEmbedding", [("X", q), ("cos", cos), ("sin", sin)], ["Y"],
          {}, lambda t: rotary(t["X"], t["cos"][:, None], t["sin"][:, None]))
    write("rotary_embedding_interleaved", "RotaryEmbedding",
          [("X", q), ("cos", cos), ("sin", sin)], ["Y"], dict(interleaved=1),
          lambda t: rotary(t["X"], t["cos"][:, None], t["sin"][:, None], interleaved=True))
    # 3-D input with num_heads, half the head rotated, caches indexed by position_ids.
    table = rng.uniform(-3, 3, size=(16, 2)).astype(np.float32)
    positions = rng.integers(0, 16, size=(batch, seq)).astype(np.int64)
    q3 = normal(batch, seq, heads * head)

    def partial(t):
        x = t["X"].reshape(batch, seq, heads, head)
        c = torch.cos(t["table"])[t["position_ids"]][:, :, None]
        s = torch.sin(t["table"])[t["position_ids"]][:, :, None]
        rotated = rotary(x[..., :4], c, s)
        return torch.cat((rotated, x[..., 4:]), dim=-1).reshape(batch, seq, heads * head)

    write("rotary_embedding_3d_partial", "RotaryEmbedding",
          [("X", q3), ("cos", np.cos(table)), ("sin", np.sin(table)),
           ("position_ids", positions)], ["Y"], dict(num_heads=heads, rotary_embedding_dim=4),
          lambda t: partial({**t, "table": torch.from_numpy(table)}))


def masked_rows():
    # A float mask whose row 1 of batch 0, head 2 is -inf for every key, and a bool mask that
    # leaves one row of a causal attention no key: the definition makes both rows zero (its
    # reference decides that on the bias), where a plain softmax would give NaN.
    b, heads, s, d = 2, 3, 4, 4
    q, k, v = normal(b, heads, s, d), normal(b, heads, s, d), normal(b, heads, s, d)
    bias = normal(b, heads, s, s)
    bias[0, 2, 1, :] = -np.inf
    bias[1, 0, 3, 1] = -np.inf
    write("attention_float_mask_empty_row", "Attention",
          [("Q", q), ("K", k), ("V", v), ("attn_mask", bias)], ["Y"], {})
    keep = np.ones((1, 1, s, s), dtype=bool)
    keep[0, 0, 2, :] = False
    write("attention_causal_bool_mask_empty_row", "Attention",
          [("Q", q), ("K", k), ("V", v), ("attn_mask", keep)], ["Y"], dict(is_causal=1))


def grid_samples():
    # Grids reach beyond [-1, 1] (zeros padding reads 0 there, border the edge, reflection
    # reflects, several times for [-3, 3]). PyTorch's grid_sample checks every case it computes
    # the same way: all but cubic with border or reflection at points outside the padded range,
    # which ONNX pads before taking the taps and PyTorch tap by tap.
    def uniform(*shape, bound):
        return rng.uniform(-bound, bound, shape).astype(np.float32)

    def torch_grid_sample(mode, padding, align):
        return lambda t: F.grid_sample(t["X"], t["grid"], mode=mode, padding_mode=padding,
                                       align_corners=bool(align))

    x = normal(2, 3, 5, 6)
    cases = [  # name, mode (opset 20's), padding, align_corners, grid bound, PyTorch agrees
        ("gridsample_linear_zeros", "linear", "zeros", 0, 1.3, True),
        ("gridsample_linear_border_align", "linear", "border", 1, 1.5, True),
        ("gridsample_linear_reflection_align", "linear", "reflection", 1, 3.0, True),
        ("gridsample_linear_reflection", "linear", "reflection", 0, 3.0, True),
        ("gridsample_nearest_zeros", "nearest", "zeros", 0, 1.3, True),
        ("gridsample_nearest_reflection", "nearest", "reflection", 0, 3.0, True),
        ("gridsample_cubic_zeros_align", "cubic", "zeros", 1, 1.3, True),
        ("gridsample_cubic_border_inside", "cubic", "border", 0, 1.0, True),
        ("gridsample_cubic_border", "cubic", "border", 0, 1.5, False),
        ("gridsample_cubic_reflection", "cubic", "reflection", 1, 3.0, False),
    ]
    torch_modes = {"linear": "bilinear", "cubic": "bicubic", "nearest": "nearest"}
    for name, mode, padding, align, bound, agrees in cases:
        grid = uniform(2, 4, 7, 2, bound=bound)
        check = torch_grid_sample(torch_modes[mode], padding, align) if agrees else None
        write(name, "GridSample", [("X", x), ("grid", grid)], ["Y"],
              dict(mode=mode, padding_mode=padding, align_corners=align), check, opset=20)
    # Opset 16's names (onnx's evaluator knows only opset 20's), one row of X.
    write("gridsample_bicubic_opset16", "GridSample",
          [("X", normal(1, 2, 1, 5)), ("grid", uniform(1, 3, 4, 2, bound=1.2))], ["Y"],
          dict(mode="bicubic"), torch_grid_sample("bicubic", "zeros", 0), opset=16,
          torch_only=True)
    # Volumetric (opset 20): trilinear, as PyTorch's 5-D grid_sample.
    write("gridsample_linear_3d_border", "GridSample",
          [("X", normal(2, 2, 3, 4, 5)), ("grid", uniform(2, 2, 3, 4, 3, bound=1.2))], ["Y"],
          dict(mode="linear", padding_mode="border"), torch_grid_sample("bilinear", "border", 0),
          opset=20)
    # One spatial axis (no PyTorch form), and a size-1 axis reflected with align_corners (which
    # onnx's evaluator divides by zero on; PyTorch reads that axis's one position).
    write("gridsample_linear_1d_reflection", "GridSample",
          [("X", normal(2, 3, 4)), ("grid", uniform(2, 6, 1, bound=2.5))], ["Y"],
          dict(mode="linear", padding_mode="reflection"), opset=20)
    write("gridsample_linear_single_row_reflection_align", "GridSample",
          [("X", normal(1, 2, 1, 4)), ("grid", uniform(1, 3, 3, 2, bound=2.0))], ["Y"],
          dict(mode="linear", padding_mode="reflection", align_corners=1),
          torch_grid_sample("bilinear", "reflection", 1), opset=20, torch_only=True)
    # Nearest moves data: integers too.
    write("gridsample_nearest_int32", "GridSample",
          [("X", rng.integers(-100, 100, (1, 2, 3, 4)).astype(np.int32)),
           ("grid", uniform(1, 3, 5, 2, bound=1.3))], ["Y"], dict(mode="nearest"), opset=20)


def col2ims():
    # nn.Fold's overlapping blocks (each image position sums the entries that read it), then
    # strides, dilations and asymmetric pads (ONNX's; PyTorch pads symmetrically), and 3-D.
    def fold(size, kernel, **options):
        return lambda t: F.fold(t["input"], size, kernel, **options)

    def sizes(*values):
        return np.array(values, dtype=np.int64)

    write("col2im_overlapping", "Col2Im",
          [("input", normal(2, 3 * 9, 5 * 6)), ("image_shape", sizes(5, 6)),
           ("block_shape", sizes(3, 3))], ["Y"], dict(pads=[1, 1, 1, 1]),
          fold((5, 6), 3, padding=1), opset=18, constants=("image_shape", "block_shape"))
    write("col2im_strided_dilated", "Col2Im",
          [("input", normal(1, 2 * 6, 3 * 2)), ("image_shape", sizes(7, 8)),
           ("block_shape", sizes(2, 3))], ["Y"], dict(strides=[2, 3], dilations=[2, 1]),
          fold((7, 8), (2, 3), stride=(2, 3), dilation=(2, 1)), opset=18,
          constants=("image_shape", "block_shape"))
    write("col2im_asymmetric_pads", "Col2Im",
          [("input", normal(1, 2 * 4, 4 * 2)), ("image_shape", sizes(4, 4)),
           ("block_shape", sizes(2, 2))], ["Y"], dict(pads=[1, 0, 0, 0], strides=[1, 2]),
          opset=18, constants=("image_shape", "block_shape"))


def reduce_prods():
    # ReduceProd of graph inputs (computed at run time): several axes of odd and even lengths,
    # all axes without keepdims, and integers (exact).
    axes = lambda *values: np.array(values, dtype=np.int64)
    write("reduce_prod_axes", "ReduceProd", [("X", normal(3, 4, 5)), ("axes", axes(0, 2))],
          ["Y"], dict(keepdims=1), lambda t: t["X"].prod(0, keepdim=True).prod(2, keepdim=True),
          opset=18, constants=("axes",))
    write("reduce_prod_all", "ReduceProd", [("X", normal(2, 7) * 0.8)], ["Y"],
          dict(keepdims=0), lambda t: t["X"].prod(), opset=18)
    write("reduce_prod_int64", "ReduceProd",
          [("X", rng.integers(-9, 9, (3, 6)).astype(np.int64)), ("axes", axes(-1))], ["Y"],
          dict(keepdims=0), lambda t: t["X"].prod(-1), opset=18, constants=("axes",))


def far_grids():
    # Points far outside X under zeros padding: every tap of a cubic reads 0 (none may be moved
    # back inside), and a far 3-D linear case.
    def uniform(*shape, bound):
        return rng.uniform(-bound, bound, shape).astype(np.float32)

    write("gridsample_cubic_zeros_far", "GridSample",
          [("X", normal(1, 2, 4, 5)), ("grid", uniform(1, 5, 6, 2, bound=3.0))], ["Y"],
          dict(mode="cubic"),
          lambda t: F.grid_sample(t["X"], t["grid"], mode="bicubic", align_corners=False),
          opset=20)
    write("gridsample_linear_zeros_far_3d", "GridSample",
          [("X", normal(1, 2, 3, 3, 4)), ("grid", uniform(1, 2, 3, 4, 3, bound=3.0))], ["Y"],
          dict(mode="linear", align_corners=1),
          lambda t: F.grid_sample(t["X"], t["grid"], mode="bilinear", align_corners=True),
          opset=20)


def lrn_reference(x, size, alpha, beta, bias):
    # ONNX's LRN: the square sum over channels c - floor((size-1)/2) .. c + ceil((size-1)/2).
    x64 = x.astype(np.float64)
    square_sum = np.zeros_like(x64)
    channels = x.shape[1]
    for c in range(channels):
        begin = max(0, c - (size - 1) // 2)
        end = min(channels, c + size // 2 + 1)
        square_sum[:, c] = (x64[:, begin:end] ** 2).sum(axis=1)
    return (x64 / (bias + alpha / size * square_sum) ** beta).astype(x.dtype)


def hardmax_coerced(x, axis):
    # Hardmax before opset 13: one 1 per row of x as 2-D [d0 * .. * d(axis-1), rest].
    rows = x.reshape(int(np.prod(x.shape[:axis])), -1)
    y = np.zeros_like(rows)
    y[np.arange(rows.shape[0]), rows.argmax(axis=1)] = 1
    return y.reshape(x.shape)


def composite_ops():
    # LRN: an even size (ONNX's window, one channel later than PyTorch's), rank 3; an odd size
    # at rank 5, where PyTorch's nn.LocalResponseNorm computes the same.
    x = normal(2, 6, 5)
    write("lrn_even_size_rank3", "LRN", [("X", x)], ["Y"],
          dict(size=4, alpha=0.5, beta=0.6, bias=1.5),
          reference=lambda f: lrn_reference(f["X"], 4, 0.5, 0.6, 1.5), opset=13)
    write("lrn_odd_size_rank5", "LRN", [("X", normal(2, 5, 2, 3, 2))], ["Y"],
          dict(size=3, alpha=0.3, beta=0.75, bias=2.0),
          lambda t: F.local_response_norm(t["X"], 3, alpha=0.3, beta=0.75, k=2.0),
          reference=lambda f: lrn_reference(f["X"], 3, 0.3, 0.75, 2.0), opset=13)

    # MaxUnpool of PyTorch's max_pool2d (its per-plane indices made whole-tensor, as ONNX's
    # MaxPool writes them), checked against PyTorch's max_unpool2d; a 1-D case with pads and an
    # output_shape beyond the unpooled one (zeros appended).
    pooled, planes = F.max_pool2d(torch.from_numpy(normal(2, 3, 5, 6)), 2, 2, return_indices=True)
    n, c, h, w = pooled.shape
    offsets = (np.arange(n * c).reshape(n, c, 1, 1) * 4 * 6).astype(np.int64)
    whole = planes.numpy() + offsets
    write("maxunpool_of_max_pool", "MaxUnpool", [("X", pooled.numpy()), ("I", whole)], ["Y"],
          dict(kernel_shape=[2, 2], strides=[2, 2]),
          lambda t: F.max_unpool2d(t["X"], planes, 2, 2), opset=11)
    write("maxunpool_1d_pads_output_shape", "MaxUnpool",
          [("X", normal(1, 2, 3)), ("I", np.array([[[0, 4, 6], [8, 10, 13]]], dtype=np.int64)),
           ("output_shape", np.array([1, 2, 9], dtype=np.int64))], ["Y"],
          dict(kernel_shape=[2], strides=[3], pads=[1, 0]), opset=11,
          constants=("output_shape",))

    # ReverseSequence with the batch first, rank 4, lengths 0, 1, the whole axis and between;
    # a length beyond the axis (undefined in ONNX) reverses the whole axis.
    lens = np.array([0, 1, 5, 3], dtype=np.int64)
    write("reverse_sequence_batch_first", "ReverseSequence",
          [("input", normal(4, 5, 2, 3)), ("sequence_lens", lens)], ["Y"],
          dict(batch_axis=0, time_axis=1), opset=10)
    write("reverse_sequence_beyond_the_axis", "ReverseSequence",
          [("input", normal(3, 2, 2)), ("sequence_lens", np.array([7, 2], dtype=np.int64))],
          ["Y"], {}, reference=lambda f: np.concatenate(
              [f["input"][::-1, :1], f["input"][[1, 0, 2], 1:]], axis=1), opset=10)

    # Hardmax before opset 13 (coerced to 2-D at the axis) with ties, and at 13 on a middle axis.
    tied = rng.integers(0, 3, (2, 3, 4)).astype(np.float32)
    write("hardmax_coerced_opset11", "Hardmax", [("X", tied)], ["Y"], dict(axis=1),
          reference=lambda f: hardmax_coerced(f["X"], 1), opset=11)
    write("hardmax_middle_axis_f16", "Hardmax", [("X", normal(2, 3, 4, dtype=np.float16))],
          ["Y"], dict(axis=1), opset=13)

    # Sum and Mean of three inputs broadcast together; Shrink (softshrink) and ThresholdedRelu
    # in f16, whose reference computes in f16.
    parts = [("a", normal(3, 1)), ("b", normal(1, 4)), ("c", normal(4))]
    write("sum_three_broadcast", "Sum", parts, ["Y"], {},
          lambda t: t["a"] + t["b"] + t["c"], opset=13)
    write("mean_three_broadcast_f16", "Mean",
          [(n, a.astype(np.float16)) for n, a in parts], ["Y"], {},
          reference=lambda f: (f["a"] + f["b"] + f["c"]) / np.float16(3), opset=13)
    write("shrink_soft_f16", "Shrink", [("x", normal(3, 7, dtype=np.float16))], ["y"],
          dict(lambd=0.75, bias=0.75), opset=13)
    write("thresholded_relu_f16", "ThresholdedRelu", [("x", normal(3, 7, dtype=np.float16))],
          ["y"], dict(alpha=0.25), opset=13)
    write("global_max_pool_3d", "GlobalMaxPool", [("x", normal(2, 3, 2, 3, 4))], ["y"], {},
          lambda t: t["x"].amax(dim=(2, 3, 4), keepdim=True), opset=13, torch_only=True)


def as_real(z):
    return torch.view_as_real(z).contiguous()


def spectral_ops():
    # DFT at opset 20 as dynamo writes torch.fft (axis and dft_length as inputs): a one-sided
    # spectrum, its real inverse, and a full inverse that truncates; at 17 (axis an attribute),
    # zero padding and an odd length.
    i64 = lambda v: np.array(v, dtype=np.int64)
    x = normal(2, 3, 16, 1)
    write("dft_rfft_opset20", "DFT", [("x", x), ("n", i64(16)), ("axis", i64(-2))], ["y"],
          dict(onesided=1), lambda t: as_real(torch.fft.rfft(t["x"][..., 0], dim=-1)),
          opset=20, constants=("n", "axis"))
    spectrum = normal(2, 9, 3, 2)
    write("dft_irfft_opset20", "DFT", [("x", spectrum), ("n", i64(16)), ("axis", i64(1))], ["y"],
          dict(inverse=1, onesided=1),
          lambda t: torch.fft.irfft(torch.view_as_complex(t["x"]), n=16, dim=1)[..., None],
          opset=20, constants=("n", "axis"))
    write("dft_inverse_truncated_opset20", "DFT",
          [("x", normal(2, 8, 3, 2)), ("n", i64(6)), ("axis", i64(1))], ["y"], dict(inverse=1),
          lambda t: as_real(torch.fft.ifft(torch.view_as_complex(t["x"]), n=6, dim=1)),
          opset=20, constants=("n", "axis"))
    write("dft_padded_axis0", "DFT", [("x", normal(10, 3, 1)), ("n", i64(12))], ["y"],
          dict(axis=0), lambda t: as_real(torch.fft.fft(t["x"][..., 0], n=12, dim=0)),
          opset=17, constants=("n",))
    write("dft_complex_odd", "DFT", [("x", normal(3, 7, 2))], ["y"], dict(axis=1),
          lambda t: as_real(torch.fft.fft(torch.view_as_complex(t["x"]), dim=1)), opset=17)

    # STFT with a Hann window (PyTorch's stft without centering), and a complex signal's full
    # spectrum without a window.
    signal = normal(2, 40, 1)
    hann = np.hanning(18)[1:-1].astype(np.float32)  # 16 values, none zero
    write("stft_hann_window", "STFT",
          [("signal", signal), ("step", i64(6)), ("window", hann)], ["y"], dict(onesided=1),
          lambda t: as_real(torch.stft(t["signal"][..., 0], 16, 6, window=t["window"],
                                       center=False, onesided=True,
                                       return_complex=True)).transpose(1, 2),
          opset=17, constants=("step",))
    write("stft_complex_full", "STFT",
          [("signal", normal(1, 20, 2)), ("step", i64(5)), ("", None), ("frame", i64(8))],
          ["y"], dict(onesided=0), opset=17, constants=("step", "frame"))

    # The windows, against PyTorch's (Hamming with ONNX's alpha 25/46).
    write("hann_window_periodic", "HannWindow", [("size", i64(10))], ["y"], {},
          lambda t: torch.hann_window(10), opset=17, constants=("size",))
    write("hamming_window_symmetric", "HammingWindow", [("size", i64(9))], ["y"],
          dict(periodic=0),
          lambda t: torch.hamming_window(9, periodic=False, alpha=25 / 46, beta=21 / 46),
          opset=17, constants=("size",))
    write("blackman_window_f64", "BlackmanWindow", [("size", i64(12))], ["y"],
          dict(output_datatype=onnx.TensorProto.DOUBLE),
          lambda t: torch.blackman_window(12, dtype=torch.float64), opset=17,
          constants=("size",))

    # A mel filter bank for 16 kHz audio.
    write("mel_weight_matrix_16k", "MelWeightMatrix",
          [("bins", i64(10)), ("dft", i64(64)), ("rate", i64(16000)),
           ("low", np.array(20.0, dtype=np.float32)), ("high", np.array(7000.0, dtype=np.float32))],
          ["w"], {}, opset=17, constants=("bins", "dft", "rate", "low", "high"))


def newer_opsets():
    """The forms of opsets 24 to 28: Swish, SwiGLU, CumProd, SpaceToDepth's CRD mode, Attention's
    sliding windows, external-cache lengths and short masks, and the attributes Cast and Range
    take there."""
    x = normal(3, 7)
    write("swish_alpha_opset24", "Swish", [("x", x)], ["y"], dict(alpha=0.7),
          lambda t: t["x"] * torch.sigmoid(0.7 * t["x"]), opset=24)
    write("swish_f16_opset24", "Swish", [("x", normal(2, 9, dtype=np.float16))], ["y"], {},
          opset=24)
    gate, value = normal(2, 3, 6), normal(2, 3, 6)
    write("swiglu_alpha_opset28", "SwiGLU", [("A", gate), ("B", value)], ["Y"], dict(alpha=1.5),
          lambda t: t["A"] * torch.sigmoid(1.5 * t["A"]) * t["B"], opset=28)

    # CumProd over an axis of 7 (not a power of two) with a zero among the factors, forward and
    # backward, inclusive and exclusive; i64 along the last axis.
    factors = (1 + 0.2 * normal(2, 7, 3)).astype(np.float32)
    factors[1, 3, 2] = 0
    axis1 = np.array(1, dtype=np.int64)
    write("cum_prod_axis1", "CumProd", [("x", factors), ("axis", axis1)], ["y"], {},
          lambda t: torch.cumprod(t["x"], 1), opset=26, constants=("axis",))
    write("cum_prod_exclusive_reverse", "CumProd", [("x", factors), ("axis", axis1)], ["y"],
          dict(exclusive=1, reverse=1), opset=26, constants=("axis",),
          reference=lambda f: np.concatenate(
              [np.cumprod(f["x"][:, :0:-1], axis=1)[:, ::-1], np.ones((2, 1, 3), np.float32)],
              axis=1))
    write("cum_prod_i64_last_axis", "CumProd",
          [("x", rng.integers(-3, 4, (2, 5)).astype(np.int64)),
           ("axis", np.array(-1, dtype=np.int32))], ["y"], dict(exclusive=1), opset=26,
          constants=("axis",))

    # SpaceToDepth in CRD mode is PyTorch's pixel_unshuffle.
    write("space_to_depth_crd_opset28", "SpaceToDepth", [("x", normal(2, 3, 4, 6))], ["y"],
          dict(blocksize=2, mode="CRD"), lambda t: F.pixel_unshuffle(t["x"], 2), opset=28)

    # Attention: a causal sliding window (each query sees itself and two keys before); a
    # bidirectional window over fewer keys than queries, so the last query sees no key (zero);
    # an external cache's lengths with causal alignment per batch entry (offset 1 and 3), alone
    # and with a window; a boolean mask shorter than the keys (the rest blocked).
    b, heads, d = 2, 2, 4

    def sdpa_where(seen, q_len, kv_len, lengths=(5, 5)):
        """PyTorch's attention over the keys j that seen(n, p, j) allows to the query at absolute
        position p of batch entry n (p = i + length - q_len), keys past the length blocked."""
        allowed = np.zeros((b, 1, q_len, kv_len), dtype=bool)
        for n in range(b):
            offset = lengths[n] - q_len
            for i in range(q_len):
                for j in range(kv_len):
                    allowed[n, 0, i, j] = j < lengths[n] and seen(n, i + offset, j)
        return lambda t: F.scaled_dot_product_attention(t["Q"], t["K"], t["V"],
                                                        attn_mask=torch.from_numpy(allowed))

    q, k, v = normal(b, heads, 5, d), normal(b, heads, 5, d), normal(b, heads, 5, d)
    write("attention_causal_left_window_opset25", "Attention", [("Q", q), ("K", k), ("V", v)],
          ["Y"], dict(is_causal=1, left_window_size=2),
          sdpa_where(lambda n, p, j: p - 2 <= j <= p, 5, 5), opset=25)
    kc, vc = normal(b, heads, 3, d), normal(b, heads, 3, d)
    write("attention_window_beyond_keys_opset25", "Attention", [("Q", q), ("K", kc), ("V", vc)],
          ["Y"], dict(left_window_size=1, right_window_size=0), opset=25)
    q2 = normal(b, heads, 2, d)
    lengths = np.array([3, 5], dtype=np.int64)
    inputs = [("Q", q2), ("K", k), ("V", v), ("", None), ("", None), ("", None),
              ("nonpad_kv_seqlen", lengths)]
    write("attention_nonpad_causal_opset24", "Attention", inputs, ["Y"], dict(is_causal=1),
          sdpa_where(lambda n, p, j: j <= p, 2, 5, lengths), opset=24)
    write("attention_nonpad_window_opset25", "Attention", inputs, ["Y"],
          dict(is_causal=1, left_window_size=1),
          sdpa_where(lambda n, p, j: p - 1 <= j <= p, 2, 5, lengths), opset=25)
    short = rng.random((b, 1, 5, 3)) < 0.8
    short[:, :, :, 0] = True
    write("attention_short_mask_opset24", "Attention",
          [("Q", q), ("K", k), ("V", v), ("attn_mask", short)], ["Y"], {},
          sdpa_where(lambda n, p, j: j < 3 and short[n, 0, p, j], 5, 5), opset=24)

    # Cast's round_mode acts on float8e8m0 targets only; Range's stash_type on f16 and bf16 only.
    write("cast_round_mode_opset24", "Cast", [("x", normal(4, 5))], ["y"],
          dict(to=onnx.TensorProto.FLOAT16, round_mode="down"), opset=24)
    write("cum_prod_exclusive_of_one", "CumProd",
          [("x", normal(3, 1, 2)), ("axis", np.array(1, dtype=np.int64))], ["y"],
          dict(exclusive=1), opset=26, constants=("axis",))
    write("range_stash_type_opset27", "Range",
          [("start", np.array(1.5, np.float32)), ("limit", np.array(4.0, np.float32)),
           ("delta", np.array(0.25, np.float32))], ["y"], dict(stash_type=1), opset=27,
          constants=("start", "limit", "delta"))


if __name__ == "__main__":
    main()
    normalizations()
    spatial()
    more_ops()
    masked_rows()
    grid_samples()
    col2ims()
    reduce_prods()
    far_grids()
    composite_ops()
    spectral_ops()
    newer_opsets()
