#!/usr/bin/env python3
"""Builds the real-model suite: small-config, random-weight Hugging Face and torchvision models,
traced with torch.jit.trace and saved as TorchScript, with a JSON manifest that tells the C++ test
(tests/realmodels/test_realmodels.cpp) how to make inputs for each.

    export_models.py OUT_DIR [--device cpu|cuda] [--dtype float32|float16] [--only NAME,...] [--full-size]

--full-size exports the full-size set instead (FULL_SIZE below: BERT-base as bert-base-uncased is
configured, 128 tokens; ResNet-50 at 224 pixels), the sizes the peers' benchmarks use, for speed
measurements (bench/realmodels.sh) and the GPU's checks; the default set is small so that the CPU
checks stay quick.

Weights are random (seeded), never downloaded: the suite tests that Zenith compiles the models
people bring, not what they compute. Each model is traced on its example inputs and called once
eagerly before saving, as a user would. A model this machine's libraries cannot build, trace or
save gets a manifest entry with "export_error" (the reason) instead, and the C++ tests fail that
model alone with it; the others are exported as usual.
"""
import argparse
import json
import os
import sys
import time
import warnings

# Nothing is downloaded: without these, transformers may try the network (and wait for its
# timeouts on a machine that has none).
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402

SEQ = 16        # tokens of the traced example
VOCAB = 512     # every text model's vocabulary
IMAGE = 64      # pixels a side of the traced example image (ViT and Swin use their own)


def text_inputs(batch, seq, with_mask=True, vocab=VOCAB):
    spec = [{"name": "input_ids", "kind": "ids", "shape": [batch, seq], "high": vocab}]
    if with_mask:
        spec.append({"name": "attention_mask", "kind": "mask", "shape": [batch, seq]})
    return spec


def hf_model(make_config, model_class, attention="eager"):
    """A transformers model of `model_class` with random weights, built for tracing. model_class is
    a name transformers exports, or a dotted path below transformers for a part it does not export
    (an encoder alone). attention: the attention implementation, "eager" (written out: matmul,
    softmax, matmul) or "sdpa" (scaled_dot_product_attention, transformers' default where the model
    has it)."""
    import importlib
    import transformers
    config = make_config(transformers)
    config.torchscript = True
    config.use_cache = False
    config._attn_implementation = attention
    module, _, name = model_class.rpartition(".")
    owner = importlib.import_module(f"transformers.{module}") if module else transformers
    return getattr(owner, name)(config)


def hf(name, make_config, model_class, with_mask=True, second=(3, 24), third=(2, 20), attention="eager", seq=SEQ,
       vocab=VOCAB):
    def build():
        model = hf_model(make_config, model_class, attention)
        return (model, text_inputs(2, seq, with_mask, vocab), text_inputs(*second, with_mask, vocab),
                text_inputs(*third, with_mask, vocab))
    return name, "transformers", build


def small(config, **extra):
    base = dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                intermediate_size=128, max_position_embeddings=128)
    base.update(extra)
    return config(**base)


def image_inputs(batch, size):
    return [{"name": "pixel_values", "kind": "normal", "shape": [batch, 3, size, size]}]


def hf_signal(name, make_config, model_class, inputs, load_as_saved=False):
    """A Hugging Face model of images or sounds: `inputs(batch)` is its input spec at a batch size
    (traced at 2, then called at 3 and 4). load_as_saved: the C++ test loads the module with each
    tensor on the device it was saved from, instead of mapping all of them to the model's device."""
    def build():
        return hf_model(make_config, model_class), inputs(2), inputs(3), inputs(4)
    build.load_as_saved = load_as_saved
    return name, "transformers", build


def small_vision(config, **extra):
    base = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128, image_size=32,
                patch_size=8)
    base.update(extra)
    return config(**base)


def sound_inputs(batch):
    """Raw audio: 1,600 samples (five frames of the small feature encoder below)."""
    return [{"name": "input_values", "kind": "normal", "shape": [batch, 1600]}]


def audio_features(batch):
    """Log-mel features: 16 bins of 32 frames (twice the small Whisper encoder's 16 positions)."""
    return [{"name": "input_features", "kind": "normal", "shape": [batch, 16, 32]}]


def tv_video(name, make, frames=4, size=32):
    """A torchvision video model: clips of `frames` frames of size x size pixels."""
    def build():
        import torchvision
        clips = lambda b: [{"name": "x", "kind": "normal", "shape": [b, 3, frames, size, size]}]
        return make(torchvision.models), clips(2), clips(3), clips(4)
    build.torchscript_fuser = True
    return name, "torchvision", build


def tv(name, make, size=IMAGE, second_batch=3, third_batch=4, torchscript_fuser=True):
    """torchscript_fuser=False: the C++ test calls the module with TorchScript's tensor-expression
    fuser off (docs/models.md says why for DenseNet)."""
    def build():
        import torchvision
        model = make(torchvision.models)
        return model, image_inputs(2, size), image_inputs(second_batch, size), image_inputs(third_batch, size)
    build.torchscript_fuser = torchscript_fuser
    return name, "torchvision", build


MODELS = [
    hf("hf_bert", lambda t: small(t.BertConfig), "BertModel"),
    hf("hf_distilbert", lambda t: t.DistilBertConfig(vocab_size=VOCAB, dim=64, n_layers=2, n_heads=2,
                                                     hidden_dim=128, max_position_embeddings=128),
       "DistilBertModel"),
    hf("hf_roberta", lambda t: small(t.RobertaConfig, max_position_embeddings=130), "RobertaModel"),
    hf("hf_gpt2", lambda t: t.GPT2Config(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=2, n_positions=128),
       "GPT2Model"),
    hf("hf_t5_encoder", lambda t: t.T5Config(vocab_size=VOCAB, d_model=64, d_kv=32, d_ff=128, num_layers=2,
                                             num_heads=2), "T5EncoderModel"),
    hf("hf_llama", lambda t: small(t.LlamaConfig, num_key_value_heads=1), "LlamaModel"),
    hf("hf_qwen2", lambda t: small(t.Qwen2Config, num_key_value_heads=1), "Qwen2Model"),
    hf_signal("hf_vit", lambda t: small_vision(t.ViTConfig), "ViTModel", lambda b: image_inputs(b, 32)),
    # CLIP's vision tower (quick GELU, a class token and pre-norm), BEiT (relative position biases,
    # layer scale), Wav2Vec2 (a convolutional feature encoder with group norm, a grouped
    # positional convolution under weight norm).
    hf_signal("hf_clip_vision", lambda t: small_vision(t.CLIPVisionConfig), "CLIPVisionModel",
              lambda b: image_inputs(b, 32)),
    # BEiT's trace builds its relative position index from CPU aranges and shape numbers: mapped to
    # CUDA on load, those constants meet CPU tensors and the module's own call fails.
    hf_signal("hf_beit", lambda t: small_vision(t.BeitConfig, use_relative_position_bias=True,
                                                layer_scale_init_value=0.1), "BeitModel",
              lambda b: image_inputs(b, 32), load_as_saved=True),
    hf_signal("hf_wav2vec2", lambda t: t.Wav2Vec2Config(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                                        num_attention_heads=2, conv_dim=(32, 32, 32),
                                                        conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3),
                                                        num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4),
              "Wav2Vec2Model", sound_inputs),
    # As transformers builds them by default: attention through scaled_dot_product_attention.
    hf("hf_bert_sdpa", lambda t: small(t.BertConfig), "BertModel", attention="sdpa"),
    hf("hf_gpt2_sdpa", lambda t: t.GPT2Config(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=2, n_positions=128),
       "GPT2Model", attention="sdpa"),
    hf("hf_llama_sdpa", lambda t: small(t.LlamaConfig, num_key_value_heads=1), "LlamaModel", attention="sdpa"),
    # Other families' own layers: a sliding window (Mistral), partial rotary embeddings and a
    # parallel attention and MLP block (Phi, GPT-NeoX), Gemma's scaled embeddings and RMSNorm,
    # learned positions (OPT), disentangled relative attention (DeBERTa-v2), factorized embeddings
    # and one layer's weights shared by every layer (ALBERT). Not BLOOM: its GELU is an autograd
    # Function, which TorchScript cannot save.
    hf("hf_mistral", lambda t: small(t.MistralConfig, num_key_value_heads=1, sliding_window=8), "MistralModel"),
    hf("hf_phi", lambda t: small(t.PhiConfig, partial_rotary_factor=0.5), "PhiModel"),
    hf("hf_gemma", lambda t: small(t.GemmaConfig, num_key_value_heads=1, head_dim=32), "GemmaModel"),
    hf("hf_opt", lambda t: t.OPTConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, ffn_dim=128,
                                       num_attention_heads=2, max_position_embeddings=128, word_embed_proj_dim=64),
       "OPTModel"),
    hf("hf_gpt_neox", lambda t: small(t.GPTNeoXConfig, rotary_pct=0.25), "GPTNeoXModel"),
    hf("hf_deberta_v2", lambda t: small(t.DebertaV2Config, relative_attention=True, max_relative_positions=16,
                                        position_buckets=8, pos_att_type=["p2c", "c2p"]), "DebertaV2Model"),
    hf("hf_albert", lambda t: t.AlbertConfig(vocab_size=VOCAB, embedding_size=32, hidden_size=64, num_hidden_layers=2,
                                             num_attention_heads=2, intermediate_size=128,
                                             max_position_embeddings=128), "AlbertModel"),
    # Added 2026-12-01: an encoder-decoder with cross-attention (BART), interleaved rotary
    # embeddings (GPT-J), multi-query attention beside a parallel MLP (Falcon), norms on queries and
    # keys (Qwen3), soft-capped logits and alternating sliding windows (Gemma 2), a fused qkv
    # projection (Phi-3), factorized embeddings with a projection (ELECTRA), relative position
    # buckets (MPNet), bottlenecks and an elementwise "NoNorm" (MobileBERT), grouped 1-d
    # convolutions (SqueezeBERT), span-based dynamic convolutions (ConvBERT), pooling between
    # blocks (Funnel); images through layer scale and interpolated positions (DINOv2), shifted
    # windows (Swin), attention over spatially reduced keys (SegFormer), unfolded patches between
    # convolutions (MobileViT); audio features through convolutions (Whisper's encoder, which
    # transformers does not export by name; its weights drawn 10 times wider than its default, under
    # which the convolutions' output is small beside the sinusoidal positions added to it, and two
    # inputs' outputs differed by 3.2e-2 only).
    hf("hf_electra", lambda t: small(t.ElectraConfig, embedding_size=32), "ElectraModel"),
    hf("hf_mpnet", lambda t: small(t.MPNetConfig, max_position_embeddings=130), "MPNetModel"),
    hf("hf_bart", lambda t: t.BartConfig(vocab_size=VOCAB, d_model=64, encoder_layers=2, decoder_layers=2,
                                         encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=128,
                                         decoder_ffn_dim=128, max_position_embeddings=128), "BartModel"),
    hf("hf_gptj", lambda t: t.GPTJConfig(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=2, n_positions=128,
                                         rotary_dim=16, bos_token_id=0, eos_token_id=0), "GPTJModel"),
    hf("hf_falcon", lambda t: small(t.FalconConfig, new_decoder_architecture=False, multi_query=True,
                                    parallel_attn=True, alibi=False), "FalconModel"),
    hf("hf_qwen3", lambda t: small(t.Qwen3Config, num_key_value_heads=1, head_dim=32), "Qwen3Model"),
    hf("hf_gemma2", lambda t: small(t.Gemma2Config, num_key_value_heads=1, head_dim=32, sliding_window=8),
       "Gemma2Model"),
    hf("hf_phi3", lambda t: small(t.Phi3Config, num_key_value_heads=1, pad_token_id=0, bos_token_id=0,
                                  eos_token_id=0), "Phi3Model"),
    hf("hf_mobilebert", lambda t: t.MobileBertConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2,
                                                     num_attention_heads=2, intermediate_size=128,
                                                     embedding_size=32, intra_bottleneck_size=32,
                                                     max_position_embeddings=128), "MobileBertModel"),
    hf("hf_squeezebert", lambda t: small(t.SqueezeBertConfig, embedding_size=64, q_groups=2, k_groups=2,
                                         v_groups=2, post_attention_groups=2, intermediate_groups=2,
                                         output_groups=2), "SqueezeBertModel"),
    hf("hf_convbert", lambda t: small(t.ConvBertConfig, embedding_size=64, head_ratio=2, conv_kernel_size=3),
       "ConvBertModel"),
    hf("hf_funnel", lambda t: t.FunnelConfig(vocab_size=VOCAB, block_sizes=[1, 1], d_model=64, n_head=2,
                                             d_head=32, d_inner=128, num_decoder_layers=1), "FunnelModel"),
    hf_signal("hf_dinov2", lambda t: small_vision(t.Dinov2Config), "Dinov2Model", lambda b: image_inputs(b, 32)),
    hf_signal("hf_swin", lambda t: t.SwinConfig(image_size=32, patch_size=4, embed_dim=32, depths=[2, 2],
                                                num_heads=[2, 4], window_size=4), "SwinModel",
              lambda b: image_inputs(b, 32)),
    hf_signal("hf_segformer", lambda t: t.SegformerConfig(num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1],
                                                          hidden_sizes=[16, 32], num_attention_heads=[1, 2],
                                                          patch_sizes=[7, 3], strides=[4, 2], mlp_ratios=[2, 2]),
              "SegformerModel", lambda b: image_inputs(b, 32)),
    hf_signal("hf_mobilevit", lambda t: t.MobileViTConfig(image_size=32, hidden_sizes=[32, 48, 64],
                                                          neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 64]),
              "MobileViTModel", lambda b: image_inputs(b, 32)),
    hf_signal("hf_whisper_encoder", lambda t: t.WhisperConfig(vocab_size=VOCAB, d_model=64, encoder_layers=2,
                                                              encoder_attention_heads=2, encoder_ffn_dim=128,
                                                              decoder_layers=1, decoder_attention_heads=2,
                                                              decoder_ffn_dim=128, num_mel_bins=16,
                                                              max_source_positions=16, init_std=0.2),
              "models.whisper.modeling_whisper.WhisperEncoder", audio_features),
    tv("tv_resnet18", lambda m: m.resnet18()),
    tv("tv_mobilenet_v3_small", lambda m: m.mobilenet_v3_small()),
    tv("tv_efficientnet_b0", lambda m: m.efficientnet_b0()),
    tv("tv_convnext_tiny", lambda m: m.convnext_tiny()),
    tv("tv_regnet_y_400mf", lambda m: m.regnet_y_400mf()),
    # On CUDA, TorchScript's own fuser (NNC) takes minutes over DenseNet's second call (on the H200:
    # over 150 s, against 0.27 s with the fuser off; pytorch/pytorch#33354).
    tv("tv_densenet121", lambda m: m.densenet121(), torchscript_fuser=False),
    tv("tv_shufflenet_v2", lambda m: m.shufflenet_v2_x0_5()),
    tv("tv_vit", lambda m: m.VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2,
                                               hidden_dim=64, mlp_dim=128), size=32),
    tv("tv_swin", lambda m: m.swin_transformer.SwinTransformer(patch_size=[4, 4], embed_dim=32, depths=[2, 2],
                                                               num_heads=[2, 4], window_size=[4, 4]), size=64),
    # Inverted residuals with ReLU6, grouped convolutions (ResNeXt), fire modules' concatenations
    # (SqueezeNet), inception blocks (GoogLeNet, Inception-v3 with its asymmetric kernels), fused
    # MBConv blocks (EfficientNetV2).
    tv("tv_mobilenet_v2", lambda m: m.mobilenet_v2()),
    tv("tv_resnext50", lambda m: m.resnext50_32x4d()),
    tv("tv_squeezenet", lambda m: m.squeezenet1_1()),
    tv("tv_googlenet", lambda m: m.googlenet(init_weights=True, aux_logits=False)),
    tv("tv_inception_v3", lambda m: m.inception_v3(init_weights=True, aux_logits=False), size=96),
    tv("tv_efficientnet_v2_s", lambda m: m.efficientnet_v2_s()),
    tv("tv_resnet50", lambda m: m.resnet50()),
    # Added 2026-12-01: a plain stack with large kernels and dropout (AlexNet, at 96 pixels),
    # Swin V2's scaled cosine attention and log-spaced position biases, segmentation heads with
    # dilated convolutions and upsampling to the input's size (FCN over ResNet-50, LR-ASPP over
    # MobileNetV3), 3-d convolutions over video clips (R3D-18).
    tv("tv_alexnet", lambda m: m.alexnet(), size=96),
    tv("tv_swin_v2", lambda m: m.swin_transformer.SwinTransformer(
        patch_size=[4, 4], embed_dim=32, depths=[2, 2], num_heads=[2, 4], window_size=[4, 4],
        block=m.swin_transformer.SwinTransformerBlockV2, downsample_layer=m.swin_transformer.PatchMergingV2)),
    tv("tv_fcn_resnet50", lambda m: m.segmentation.fcn_resnet50(weights=None, weights_backbone=None, num_classes=4,
                                                                 aux_loss=False)),
    tv("tv_lraspp", lambda m: m.segmentation.lraspp_mobilenet_v3_large(weights=None, weights_backbone=None,
                                                                        num_classes=4)),
    tv_video("tv_r3d_18", lambda m: m.video.r3d_18()),
]

# The full-size set (--full-size): models at the sizes their users run, for speed measurements and
# the GPU's checks. BertConfig()'s defaults are bert-base-uncased's (12 layers of 768, 30,522 tokens).
FULL_SIZE = [
    hf("hf_bert_base", lambda t: t.BertConfig(), "BertModel", seq=128, second=(3, 136), third=(2, 132),
       vocab=30522),
    tv("tv_resnet50_224", lambda m: m.resnet50(), size=224),
]


def make_input(spec, device, dtype, generator):
    shape = spec["shape"]
    if spec["kind"] == "ids":
        return torch.randint(0, spec["high"], shape, generator=generator).to(device)
    if spec["kind"] == "mask":  # traced unpadded; the test pads
        return torch.ones(shape, dtype=torch.long).to(device)
    return torch.randn(shape, generator=generator).to(device=device, dtype=dtype)


def calibrate_batch_norm(model, spec):
    """Batch-norm statistics of the model's own activations, as training would leave them. Freshly
    initialised ones (mean 0, variance 1) let activations shrink layer by layer: MobileNetV3's and
    EfficientNet's outputs come out near 1e-10, zero in float16, where a stale output could not
    show."""
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return
    for norm in norms:
        norm.reset_running_stats()
        norm.momentum = None  # a plain average over the batches below
    generator = torch.Generator().manual_seed(2)
    calibration = [dict(s, shape=[8] + s["shape"][1:]) for s in spec]
    model.train()
    with torch.no_grad():
        for _ in range(4):
            model(*(make_input(s, "cpu", torch.float32, generator) for s in calibration))


def export(name, library, build, out_dir, device, dtype):
    torch.manual_seed(0)
    model, spec, second, third = build()
    with torch.no_grad():  # zero-initialised weights (torchvision's ViT head) would hide every difference
        for parameter in model.parameters():
            if parameter.dim() >= 2 and not parameter.any():
                parameter.normal_(0, 0.02)
    calibrate_batch_norm(model, spec)
    model = model.eval().to(device=device, dtype=dtype)
    generator = torch.Generator().manual_seed(1)
    inputs = tuple(make_input(s, device, dtype, generator) for s in spec)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TracerWarnings about Python values: the test compares anyway
        if library == "transformers":  # by keyword: positions differ between families (GPT-2's second is the cache)
            traced = torch.jit.trace(model, example_kwarg_inputs={s["name"]: t for s, t in zip(spec, inputs)},
                                     strict=False, check_trace=False)
        else:
            traced = torch.jit.trace(model, inputs, strict=False, check_trace=False)  # the C++ test compares
        traced(*inputs)  # called once eagerly before it is saved, as a user would
    path = os.path.join(out_dir, name + ".pt")
    traced.save(path)
    return {"name": name, "library": library, "file": name + ".pt", "inputs": spec, "second_inputs": second, "third_inputs": third,
            "dtype": str(dtype).replace("torch.", ""), "device": device,
            "torchscript_fuser": getattr(build, "torchscript_fuser", True),
            "load_as_saved": getattr(build, "load_as_saved", False)}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--dtype", default="float32", choices=["float32", "float16"])
    parser.add_argument("--only", default="", help="comma-separated model names")
    parser.add_argument("--full-size", action="store_true", help="export the full-size set (FULL_SIZE) instead")
    args = parser.parse_args()
    only = set(filter(None, args.only.split(",")))
    os.makedirs(args.out_dir, exist_ok=True)
    dtype = getattr(torch, args.dtype)
    manifest = []
    models = FULL_SIZE if args.full_size else MODELS
    unknown = only - {name for name, _, _ in models}
    if unknown:
        print(f"[realmodels] no model named {', '.join(sorted(unknown))} in the "
              f"{'full-size' if args.full_size else 'default'} set; its names: "
              f"{', '.join(name for name, _, _ in models)}", file=sys.stderr)
        return 2
    for name, library, build in models:
        if only and name not in only:
            continue
        started = time.time()
        try:
            manifest.append(export(name, library, build, args.out_dir, args.device, dtype))
        except Exception as error:  # noqa: BLE001 - any library's failure, reported per model
            # One model that this machine's transformers or torchvision cannot build or trace must
            # not take the others down: its entry carries the reason, and the C++ tests fail that
            # model alone with it.
            reason = f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}"
            manifest.append({"name": name, "library": library, "device": args.device,
                             "dtype": args.dtype, "export_error": reason})
            print(f"[realmodels] did not export {name} ({library}, {args.device}, {args.dtype}): {reason}",
                  file=sys.stderr, flush=True)
            continue
        print(f"[realmodels] exported {name} ({library}, {args.device}, {args.dtype}) in {time.time() - started:.1f} s",
              file=sys.stderr, flush=True)
    with open(os.path.join(args.out_dir, "manifest.json"), "w") as f:
        json.dump({"models": manifest}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
