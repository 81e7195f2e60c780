#!/usr/bin/env python3
"""Hugging Face architectures through PyTorch's exporters and ampc's training step, beside
PyTorch's own training on the same batch.

Each architecture is built from `transformers` with a tiny config (random weights, dropout 0),
wrapped to return its loss, and exported by the TorchScript exporter (opset 17, training mode,
no constant folding) and the dynamo exporter (`optimize=False`, training mode). For each file:
  fwd:   `ampc run`'s loss against the module's training-mode loss;
  train: `ampc compile --optimizer sgd --lr 0.1` then `ampc train --steps 3` on that one batch,
         against 3 steps of torch.optim.SGD(lr=0.1); the largest relative gap of a step's loss.
An export PyTorch cannot write is reported as such. The token batches hold the pad token (0 by
default, `--pad-free` moves it out of the vocabulary the batch draws from), so an embedding's
padding_idx matters. With `--gradients`, each dynamo export (opset 18, or `--exporter`) is
checked instead as tools/torchvision_gradient_sweep.py checks its models: the loss and every
parameter's gradient after one step against PyTorch's in f64, beside PyTorch's own f32 error (a
parameter tied to another, as an embedding to its LM head, is in the file under the other's
name).

Needs torch, transformers, onnx, onnxscript and numpy from PyPI:

  venv/bin/python tools/hf_training_sweep.py [--ampc build/ampc] [--only gpt2,bert_mlm]
      [--gradients [--exporter dynamo_opt:18] [--precision fp16|bf16]]
"""
import argparse
import contextlib
import copy
import json
import os
import subprocess
import sys
import tempfile
import warnings

import numpy as np
import torch
import torch.nn as nn

VOCAB, BATCH, LENGTH, IMAGE = 64, 2, 8, 16
NO_DROPOUT = dict(hidden_dropout_prob=0, attention_probs_dropout_prob=0)
# A speech encoder over 400 samples: two feature convolutions, then two transformer layers.
SPEECH = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
              conv_dim=(8, 8), conv_stride=(5, 2), conv_kernel=(10, 3),
              num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2, num_labels=3,
              hidden_dropout=0, attention_dropout=0, activation_dropout=0, feat_proj_dropout=0,
              layerdrop=0, final_dropout=0, mask_time_prob=0)


def small(**config):
    return dict(vocab_size=VOCAB, **config)


def encoder(**config):
    return small(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                 **config)


def decoder(**config):
    return encoder(max_position_embeddings=16, **config)


def architectures(T):
    """name -> (model factory, kind of batch: lm, seq2seq, classify, image, audio, clip)."""
    return {
        "gpt2": (lambda: T.GPT2LMHeadModel(T.GPT2Config(**small(
            n_embd=32, n_layer=2, n_head=4, n_positions=16, resid_pdrop=0, embd_pdrop=0,
            attn_pdrop=0))), "lm"),
        "bert_mlm": (lambda: T.BertForMaskedLM(T.BertConfig(**encoder(
            max_position_embeddings=16, **NO_DROPOUT))), "lm"),
        "roberta_mlm": (lambda: T.RobertaForMaskedLM(T.RobertaConfig(**encoder(
            max_position_embeddings=20, **NO_DROPOUT))), "lm"),
        "distilbert_mlm": (lambda: T.DistilBertForMaskedLM(T.DistilBertConfig(**small(
            dim=32, n_layers=2, n_heads=4, hidden_dim=64, max_position_embeddings=16, dropout=0,
            attention_dropout=0))), "lm"),
        "albert_mlm": (lambda: T.AlbertForMaskedLM(T.AlbertConfig(**encoder(
            embedding_size=16, max_position_embeddings=16, **NO_DROPOUT))), "lm"),
        "deberta_v2_mlm": (lambda: T.DebertaV2ForMaskedLM(T.DebertaV2Config(**encoder(
            max_position_embeddings=16, **NO_DROPOUT))), "lm"),
        "electra_cls": (lambda: T.ElectraForSequenceClassification(T.ElectraConfig(**encoder(
            embedding_size=16, max_position_embeddings=16, num_labels=3, **NO_DROPOUT))),
            "classify"),
        "llama": (lambda: T.LlamaForCausalLM(T.LlamaConfig(**decoder(num_key_value_heads=2))),
                  "lm"),
        "qwen2": (lambda: T.Qwen2ForCausalLM(T.Qwen2Config(**decoder(num_key_value_heads=2))),
                  "lm"),
        "gemma": (lambda: T.GemmaForCausalLM(T.GemmaConfig(**decoder(
            num_key_value_heads=1, head_dim=8))), "lm"),
        "phi": (lambda: T.PhiForCausalLM(T.PhiConfig(**decoder(
            resid_pdrop=0, embd_pdrop=0, attention_dropout=0))), "lm"),
        "gpt_neox": (lambda: T.GPTNeoXForCausalLM(T.GPTNeoXConfig(**decoder(
            hidden_dropout=0, attention_dropout=0))), "lm"),
        "falcon": (lambda: T.FalconForCausalLM(T.FalconConfig(**small(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=4, hidden_dropout=0,
            attention_dropout=0))), "lm"),
        "bloom": (lambda: T.BloomForCausalLM(T.BloomConfig(**small(
            hidden_size=32, n_layer=2, n_head=4, hidden_dropout=0, attention_dropout=0))), "lm"),
        "opt": (lambda: T.OPTForCausalLM(T.OPTConfig(**small(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=4, ffn_dim=64,
            max_position_embeddings=16, word_embed_proj_dim=32, dropout=0,
            attention_dropout=0))), "lm"),
        "mistral": (lambda: T.MistralForCausalLM(T.MistralConfig(**decoder(
            num_key_value_heads=2, sliding_window=4))), "lm"),
        "qwen3": (lambda: T.Qwen3ForCausalLM(T.Qwen3Config(**decoder(
            num_key_value_heads=2, head_dim=8))), "lm"),
        "gemma2": (lambda: T.Gemma2ForCausalLM(T.Gemma2Config(**decoder(
            num_key_value_heads=2, head_dim=8, sliding_window=4))), "lm"),
        "phi3": (lambda: T.Phi3ForCausalLM(T.Phi3Config(**decoder(
            num_key_value_heads=2, pad_token_id=0, resid_pdrop=0, embd_pdrop=0,
            attention_dropout=0))), "lm"),
        "olmo": (lambda: T.OlmoForCausalLM(T.OlmoConfig(**decoder(pad_token_id=0))), "lm"),
        "stablelm": (lambda: T.StableLmForCausalLM(T.StableLmConfig(**decoder(
            num_key_value_heads=2, hidden_dropout=0, attention_dropout=0))), "lm"),
        "gptj": (lambda: T.GPTJForCausalLM(T.GPTJConfig(**small(
            n_embd=32, n_layer=2, n_head=4, rotary_dim=4, n_positions=16, resid_pdrop=0,
            embd_pdrop=0, attn_pdrop=0))), "lm"),
        "mpnet_mlm": (lambda: T.MPNetForMaskedLM(T.MPNetConfig(**encoder(
            max_position_embeddings=20, **NO_DROPOUT))), "lm"),
        "mobilebert_mlm": (lambda: T.MobileBertForMaskedLM(T.MobileBertConfig(**encoder(
            embedding_size=16, intra_bottleneck_size=16, true_hidden_size=16,
            num_feedforward_networks=2, max_position_embeddings=16, **NO_DROPOUT))), "lm"),
        "t5": (lambda: T.T5ForConditionalGeneration(T.T5Config(**small(
            d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, dropout_rate=0,
            decoder_start_token_id=0))), "seq2seq"),
        "bart": (lambda: T.BartForConditionalGeneration(T.BartConfig(**small(
            d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
            max_position_embeddings=16, dropout=0, attention_dropout=0, activation_dropout=0))),
            "seq2seq"),
        "gpt_bigcode": (lambda: T.GPTBigCodeForCausalLM(T.GPTBigCodeConfig(**small(
            n_embd=32, n_layer=2, n_head=4, n_positions=16, multi_query=True, resid_pdrop=0,
            embd_pdrop=0, attn_pdrop=0))), "lm"),
        "codegen": (lambda: T.CodeGenForCausalLM(T.CodeGenConfig(**small(
            n_embd=32, n_layer=2, n_head=4, n_positions=16, rotary_dim=4, resid_pdrop=0,
            embd_pdrop=0, attn_pdrop=0))), "lm"),
        "granite": (lambda: T.GraniteForCausalLM(T.GraniteConfig(**decoder(
            num_key_value_heads=2))), "lm"),
        "cohere": (lambda: T.CohereForCausalLM(T.CohereConfig(**decoder(
            num_key_value_heads=2))), "lm"),
        "starcoder2": (lambda: T.Starcoder2ForCausalLM(T.Starcoder2Config(**decoder(
            num_key_value_heads=2, residual_dropout=0, embedding_dropout=0))), "lm"),
        "gemma3": (lambda: T.Gemma3ForCausalLM(T.Gemma3TextConfig(**decoder(
            num_key_value_heads=2, head_dim=8, sliding_window=4))), "lm"),
        "mamba": (lambda: T.MambaForCausalLM(T.MambaConfig(**small(
            hidden_size=32, num_hidden_layers=2, state_size=4, expand=2, conv_kernel=4))), "lm"),
        "xlnet": (lambda: T.XLNetLMHeadModel(T.XLNetConfig(**small(
            d_model=32, n_layer=2, n_head=4, d_inner=64, dropout=0))), "lm"),
        "modernbert_mlm": (lambda: T.ModernBertForMaskedLM(T.ModernBertConfig(**encoder(
            max_position_embeddings=16, pad_token_id=0, global_attn_every_n_layers=2,
            local_attention=4))), "lm"),
        "funnel_mlm": (lambda: T.FunnelForMaskedLM(T.FunnelConfig(**small(
            d_model=32, n_head=4, d_head=8, d_inner=64, block_sizes=[1, 1], hidden_dropout=0,
            attention_dropout=0, activation_dropout=0))), "lm"),
        "convbert_mlm": (lambda: T.ConvBertForMaskedLM(T.ConvBertConfig(**encoder(
            **NO_DROPOUT))), "lm"),
        "squeezebert_mlm": (lambda: T.SqueezeBertForMaskedLM(T.SqueezeBertConfig(**encoder(
            embedding_size=32, **NO_DROPOUT))), "lm"),
        "marian": (lambda: T.MarianMTModel(T.MarianConfig(**small(
            d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
            max_position_embeddings=16, dropout=0, pad_token_id=0,
            decoder_start_token_id=0))), "seq2seq"),
        "pegasus": (lambda: T.PegasusForConditionalGeneration(T.PegasusConfig(**small(
            d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
            max_position_embeddings=16, dropout=0, pad_token_id=0,
            decoder_start_token_id=0))), "seq2seq"),
        "vit": (lambda: T.ViTForImageClassification(T.ViTConfig(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
            image_size=IMAGE, patch_size=4, num_labels=5, **NO_DROPOUT)), "image"),
        "convnext": (lambda: T.ConvNextForImageClassification(T.ConvNextConfig(
            hidden_sizes=[8, 16], depths=[1, 1], num_stages=2, image_size=IMAGE, num_labels=5)),
            "image"),
        "resnet": (lambda: T.ResNetForImageClassification(T.ResNetConfig(
            embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], num_labels=5)), "image"),
        "segformer": (lambda: T.SegformerForImageClassification(T.SegformerConfig(
            num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[8, 16],
            patch_sizes=[3, 3], strides=[2, 2], num_attention_heads=[1, 2], mlp_ratios=[2, 2],
            num_labels=5, drop_path_rate=0, classifier_dropout_prob=0, **NO_DROPOUT)), "image"),
        "swin": (lambda: T.SwinForImageClassification(T.SwinConfig(
            image_size=IMAGE, patch_size=2, embed_dim=8, depths=[1, 1], num_heads=[1, 2],
            window_size=4, num_labels=5, drop_path_rate=0, **NO_DROPOUT)), "image"),
        "deit": (lambda: T.DeiTForImageClassification(T.DeiTConfig(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
            image_size=IMAGE, patch_size=4, num_labels=5, **NO_DROPOUT)), "image"),
        "beit": (lambda: T.BeitForImageClassification(T.BeitConfig(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
            image_size=IMAGE, patch_size=4, num_labels=5, use_relative_position_bias=True,
            drop_path_rate=0, **NO_DROPOUT)), "image"),
        "dinov2": (lambda: T.Dinov2ForImageClassification(T.Dinov2Config(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=4, mlp_ratio=2,
            image_size=IMAGE, patch_size=4, num_labels=5, drop_path_rate=0, **NO_DROPOUT)),
            "image"),
        "mobilenet_v2": (lambda: T.MobileNetV2ForImageClassification(T.MobileNetV2Config(
            image_size=IMAGE, depth_multiplier=0.25, num_labels=5, classifier_dropout_prob=0)),
            "image"),
        # Its pooler is nn.AvgPool2d(hidden_dim, ceil_mode=True): a kernel larger than the map.
        "efficientnet": (lambda: T.EfficientNetForImageClassification(T.EfficientNetConfig(
            image_size=IMAGE, width_coefficient=0.1, depth_coefficient=0.1, hidden_dim=128,
            kernel_sizes=[3] * 7, strides=[1, 2, 2, 1, 1, 1, 1],
            num_labels=5, dropout_rate=0, drop_connect_rate=0)), "image"),
        "regnet": (lambda: T.RegNetForImageClassification(T.RegNetConfig(
            embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], groups_width=4,
            num_labels=5)), "image"),
        "mobilevit": (lambda: T.MobileViTForImageClassification(T.MobileViTConfig(
            image_size=IMAGE, patch_size=2, hidden_sizes=[16, 24, 32],
            neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 64], num_labels=5,
            classifier_dropout_prob=0, **NO_DROPOUT)), "image"),
        "swinv2": (lambda: T.Swinv2ForImageClassification(T.Swinv2Config(
            image_size=IMAGE, patch_size=2, embed_dim=16, depths=[1, 1], num_heads=[2, 2],
            window_size=4, num_labels=5, drop_path_rate=0, **NO_DROPOUT)), "image"),
        "poolformer": (lambda: T.PoolFormerForImageClassification(T.PoolFormerConfig(
            hidden_sizes=[8, 16], depths=[1, 1], num_encoder_blocks=2, patch_sizes=[7, 3],
            strides=[4, 2], padding=[2, 1], num_labels=5, drop_path_rate=0)), "image"),
        "wav2vec2": (lambda: T.Wav2Vec2ForSequenceClassification(T.Wav2Vec2Config(
            **SPEECH)), "audio"),
        "hubert": (lambda: T.HubertForSequenceClassification(T.HubertConfig(**SPEECH)), "audio"),
        "wavlm": (lambda: T.WavLMForSequenceClassification(T.WavLMConfig(
            num_buckets=8, max_bucket_distance=16, **SPEECH)), "audio"),
        "clip": (lambda: T.CLIPModel(T.CLIPConfig(
            text_config=dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=1,
                             num_attention_heads=4, intermediate_size=64,
                             max_position_embeddings=16, pad_token_id=VOCAB - 1, bos_token_id=1,
                             eos_token_id=2),
            vision_config=dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                               intermediate_size=64, image_size=IMAGE, patch_size=4),
            projection_dim=16)), "clip"),
    }


class WithLoss(nn.Module):
    """The model's loss from (x, y), whatever its keyword arguments are called."""

    def __init__(self, model, kind):
        super().__init__()
        self.model, self.kind = model, kind

    def forward(self, x, y):
        if self.kind == "clip":
            return self.model(input_ids=x, pixel_values=y, return_loss=True).loss
        if self.kind in ("lm", "seq2seq"):
            return self.model(input_ids=x, labels=y).loss
        return self.model(x, labels=y).loss


def batch(kind, pad_free, g):
    low = 1 if pad_free else 0
    ids = torch.randint(low, VOCAB, (BATCH, LENGTH), generator=g)
    if kind == "image":
        return torch.randn(BATCH, 3, IMAGE, IMAGE, generator=g), torch.randint(0, 5, (BATCH,), generator=g)
    if kind == "audio":
        return torch.randn(BATCH, 400, generator=g), torch.randint(0, 3, (BATCH,), generator=g)
    if kind == "classify":
        return ids, torch.randint(0, 3, (BATCH,), generator=g)
    if kind == "clip":
        return ids, torch.randn(BATCH, 3, IMAGE, IMAGE, generator=g)
    return ids, torch.randint(low, VOCAB, (BATCH, LENGTH), generator=g)


@contextlib.contextmanager
def quiet():
    """Standard output and error (the file descriptors, which native code writes to) go to
    /dev/null for the duration."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        os.dup2(null, 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved + [null]:
            os.close(fd)


def export(module, args, path, exporter):
    kwargs = dict(input_names=["x", "y"], output_names=["loss"],
                  training=torch.onnx.TrainingMode.TRAINING)
    # The exporters print progress, and the TorchScript one the whole graph when it fails.
    with warnings.catch_warnings(), quiet():
        warnings.simplefilter("ignore")
        if exporter == "torchscript":
            torch.onnx.export(module, args, path, dynamo=False, opset_version=17,
                              do_constant_folding=False, **kwargs)
        else:
            torch.onnx.export(module, args, path, dynamo=True, optimize=False, **kwargs)


def ampc_losses(ampc, module, path, x, y, work):
    """`ampc run`'s loss, and the losses of 3 SGD steps of `ampc train` (or an error line), with
    the parameters `module` does not train frozen."""
    from torchvision_gradient_sweep import freeze_flags
    inputs = os.path.join(work, "inputs.npz")
    np.savez(inputs, x=x.numpy(), y=y.numpy())
    run = subprocess.run([ampc, "run", path, "--inputs", inputs, "--output-dir", work],
                         capture_output=True, text=True)
    if run.returncode != 0:
        return None, f"run failed: {run.stderr.strip().splitlines()[-1][:200]}"
    forward = float(np.load(os.path.join(work, "loss.npy")))
    train = os.path.join(work, "train.onnx")
    data = os.path.join(work, "data.npz")
    log = os.path.join(work, "log.jsonl")
    np.savez(data, x=x.numpy()[None], y=y.numpy()[None])
    for command in ([ampc, "compile", path, "-o", train, "--optimizer", "sgd", "--lr", "0.1"] +
                    freeze_flags(module),
                    [ampc, "train", train, "--data", data, "--steps", "3", "--log", log]):
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            return forward, f"{command[1]} failed: {done.stderr.strip().splitlines()[-1][:200]}"
    with open(log) as f:
        return forward, [json.loads(line)["loss"] for line in f if '"loss"' in line]


def torch_losses(module, x, y):
    module = copy.deepcopy(module)
    optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
    losses = []
    for _ in range(3):
        optimizer.zero_grad()
        loss = module(x, y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ampc", default=os.path.join(os.path.dirname(__file__), "..", "build",
                                                       "ampc"))
    parser.add_argument("--only", default="", help="comma-separated architecture names")
    parser.add_argument("--pad-free", action="store_true",
                        help="draw tokens from 1..vocab-1, so the pad token 0 is not in a batch")
    parser.add_argument("--gradients", action="store_true",
                        help="check the dynamo export's one-step gradients against f64 instead")
    parser.add_argument("--exporter", default="dynamo:18",
                        help="with --gradients: exporter:opset, as tools/torchvision_gradient_"
                        "sweep.py's --exporters takes them")
    parser.add_argument("--precision", choices=("fp32", "fp16", "bf16"), default="fp32",
                        help="with --gradients: compile at this precision and compare with "
                        "PyTorch's CPU autocast (tools/torchvision_gradient_sweep.py)")
    args = parser.parse_args()
    if (args.precision != "fp32" or args.exporter != "dynamo:18") and not args.gradients:
        parser.error("--precision and --exporter need --gradients")
    if args.gradients:
        from torchvision_gradient_sweep import parse_exporters
        parse_exporters(args.exporter)
    import transformers
    import logging
    logging.disable(logging.WARNING)
    table = architectures(transformers)
    names = [n for n in args.only.split(",") if n] or list(table)
    for name in names:
        if name not in table:
            sys.exit(f"unknown architecture {name!r} (known: {', '.join(table)})")
    worst = 0.0
    with tempfile.TemporaryDirectory() as work:
        for name in names:
            factory, kind = table[name]
            torch.manual_seed(0)
            module = WithLoss(factory(), kind).train()
            x, y = batch(kind, args.pad_free, torch.Generator().manual_seed(1))
            with torch.no_grad():
                want = module(x, y).item()
            if args.gradients:
                from torchvision_gradient_sweep import check
                line = check(args.ampc, module, x, y, args.exporter, work, args.precision)
                print(f"{name:16s} {line}", flush=True)
                continue
            reference = torch_losses(module, x, y)
            for exporter in ("torchscript", "dynamo"):
                path = os.path.join(work, f"{name}.{exporter}.onnx")
                try:
                    export(copy.deepcopy(module), (x, y), path, exporter)
                except Exception as e:  # an exporter that cannot export it: reported
                    print(f"{name:16s} {exporter:11s} export failed: "
                          f"{str(e).strip().splitlines()[0][:120]}", flush=True)
                    continue
                forward, losses = ampc_losses(args.ampc, module, path, x, y, work)
                fwd = "" if forward is None else f"fwd {abs(forward - want) / abs(want):.1e}"
                if isinstance(losses, str):
                    print(f"{name:16s} {exporter:11s} {fwd}  {losses}", flush=True)
                    continue
                gap = max(abs(a - b) / abs(b) for a, b in zip(losses, reference))
                worst = max(worst, gap)
                print(f"{name:16s} {exporter:11s} {fwd}  train {gap:.1e}"
                      f"{'  <- differs' if gap > 1e-4 else ''}", flush=True)
    if not args.gradients:
        print(f"largest training gap: {worst:.1e}")


if __name__ == "__main__":
    main()
