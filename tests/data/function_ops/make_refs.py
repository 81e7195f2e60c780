#!/usr/bin/env python3
"""Writes the reference cases of tests/function_ops_test.cc: small models of the ONNX ops
ampc expands at import (Attention, RMSNormalization, GroupNormalization,
InstanceNormalization) with their inputs and expected outputs.

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
import onnx.reference
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(7)
F32, F16, BOOL = onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BOOL


def normal(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def write(name, op, inputs, outputs, attrs, torch_check=None, opset=23):
    """inputs: [(name, array)] ('' for an omitted optional input); outputs: names."""
    feeds = {n: a for n, a in inputs if n}
    infos = [h.make_tensor_value_info(n, onnx.helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
             for n, a in inputs if n]
    node = h.make_node(op, [n for n, _ in inputs], outputs, name=name, **attrs)
    out_infos = [h.make_tensor_value_info(n, onnx.TensorProto.UNDEFINED, None) for n in outputs if n]
    graph = h.make_graph([node], name, infos, out_infos)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)], ir_version=10)
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
    arrays = dict(feeds)
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


if __name__ == "__main__":
    main()
    normalizations()
