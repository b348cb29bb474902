"""Python copies of the C++ model zoo (examples/models), for the Python peers (torch.compile,
TorchScript tracing, AOTInductor export).

Each module has the C++ model's parameter and buffer names, so one weights file loads into both
with every name and shape checked, and the same arithmetic in the same order; the suite checks
that the two eager outputs agree before it times anything. One formulation differs on purpose:
the decoder's causal mask is built from index comparisons rather than triu(past + 1), whose
diagonal argument would freeze the cache length into a TorchScript trace or an exported program.
The mask's values are the same.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

BERT_CONFIGS = {
    "base": dict(vocab_size=30522, hidden_size=768, num_layers=12, num_heads=12, intermediate_size=3072,
                 max_position_embeddings=512, type_vocab_size=2, layer_norm_eps=1e-12),
    "small": dict(vocab_size=128, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64,
                  max_position_embeddings=64, type_vocab_size=2, layer_norm_eps=1e-12),
}
CNN_CONFIGS = {
    "resnet50": dict(in_channels=3, stem_channels=64, layers=[3, 4, 6, 3], widths=[64, 128, 256, 512], expansion=4,
                     num_classes=1000),
    "small": dict(in_channels=3, stem_channels=8, layers=[1, 1], widths=[8, 16], expansion=4, num_classes=10),
}
LLAMA_CONFIGS = {
    "tinyllama": dict(vocab_size=32000, hidden_size=2048, num_layers=22, num_heads=32, num_kv_heads=4,
                      intermediate_size=5632, rope_theta=10000.0, rms_norm_eps=1e-5, max_position_embeddings=2048),
    "small": dict(vocab_size=256, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=172,
                  rope_theta=10000.0, rms_norm_eps=1e-5, max_position_embeddings=128),
}


def mask_fill_value(dtype):
    """The most negative finite value of the score dtype, as models/mask_value.h chooses it."""
    return torch.finfo(dtype).min


class Chain(nn.Module):
    """y = gelu(x*a + b)*c, the elementwise workload."""

    def forward(self, x, a, b, c):
        return F.gelu(x * a + b) * c


class LinearRelu(nn.Module):
    """The dynamic-shape workload (bench/suite/linear_relu.h)."""

    def __init__(self, features):
        super().__init__()
        self.linear = nn.Linear(features, features)

    def forward(self, x):
        return torch.relu(self.linear(x))


# --- BERT (examples/models/bert.cpp) --------------------------------------------------------------

class BertEmbeddings(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.word_embeddings = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.position_embeddings = nn.Embedding(c["max_position_embeddings"], c["hidden_size"])
        self.token_type_embeddings = nn.Embedding(c["type_vocab_size"], c["hidden_size"])
        self.layer_norm = nn.LayerNorm(c["hidden_size"], eps=c["layer_norm_eps"])

    def forward(self, input_ids):
        positions = torch.arange(input_ids.size(1), dtype=torch.long, device=input_ids.device).unsqueeze(0)
        token_types = torch.zeros_like(input_ids)
        x = self.word_embeddings(input_ids) + self.position_embeddings(positions) + \
            self.token_type_embeddings(token_types)
        return self.layer_norm(x)


class BertSelfAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.num_heads = c["num_heads"]
        self.head_dim = c["hidden_size"] // c["num_heads"]
        self.query = nn.Linear(c["hidden_size"], c["hidden_size"])
        self.key = nn.Linear(c["hidden_size"], c["hidden_size"])
        self.value = nn.Linear(c["hidden_size"], c["hidden_size"])

    def forward(self, x, additive_mask):
        batch, seq = x.size(0), x.size(1)

        def split_heads(t):
            return t.view(batch, seq, self.num_heads, self.head_dim).transpose(1, 2)

        q, k, v = split_heads(self.query(x)), split_heads(self.key(x)), split_heads(self.value(x))
        scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))
        probs = torch.softmax(scores + additive_mask, -1)
        context = torch.matmul(probs, v)
        return context.transpose(1, 2).reshape(batch, seq, self.num_heads * self.head_dim)


class BertLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        h, eps = c["hidden_size"], c["layer_norm_eps"]
        self.attention = BertSelfAttention(c)
        self.attention_output = nn.Linear(h, h)
        self.attention_norm = nn.LayerNorm(h, eps=eps)
        self.intermediate = nn.Linear(h, c["intermediate_size"])
        self.output = nn.Linear(c["intermediate_size"], h)
        self.output_norm = nn.LayerNorm(h, eps=eps)

    def forward(self, x, additive_mask):
        x = self.attention_norm(x + self.attention_output(self.attention(x, additive_mask)))
        return self.output_norm(x + self.output(F.gelu(self.intermediate(x))))


class Bert(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embeddings = BertEmbeddings(c)
        self.layers = nn.ModuleList(BertLayer(c) for _ in range(c["num_layers"]))

    def forward(self, input_ids, attention_mask):
        x = self.embeddings(input_ids)
        keep = attention_mask.to(x.dtype).unsqueeze(1).unsqueeze(2)
        additive_mask = torch.rsub(keep, 1.0) * mask_fill_value(x.dtype)
        for layer in self.layers:
            x = layer(x, additive_mask)
        return x


# --- ResNet-style CNN (examples/models/cnn.cpp) ---------------------------------------------------

def _conv(cin, cout, kernel, stride, padding):
    return nn.Conv2d(cin, cout, kernel, stride=stride, padding=padding, bias=False)


class Bottleneck(nn.Module):
    def __init__(self, cin, width, expansion, stride):
        super().__init__()
        cout = width * expansion
        self.conv1, self.bn1 = _conv(cin, width, 1, 1, 0), nn.BatchNorm2d(width)
        self.conv2, self.bn2 = _conv(width, width, 3, stride, 1), nn.BatchNorm2d(width)
        self.conv3, self.bn3 = _conv(width, cout, 1, 1, 0), nn.BatchNorm2d(cout)
        self.has_downsample = stride != 1 or cin != cout
        if self.has_downsample:
            self.downsample_conv, self.downsample_bn = _conv(cin, cout, 1, stride, 0), nn.BatchNorm2d(cout)
        self.out_channels = cout

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        out = torch.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        shortcut = self.downsample_bn(self.downsample_conv(x)) if self.has_downsample else x
        return torch.relu(out + shortcut)


class Cnn(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.stem_conv = _conv(c["in_channels"], c["stem_channels"], 7, 2, 3)
        self.stem_bn = nn.BatchNorm2d(c["stem_channels"])
        blocks, channels = [], c["stem_channels"]
        for stage, (count, width) in enumerate(zip(c["layers"], c["widths"])):
            for b in range(count):
                block = Bottleneck(channels, width, c["expansion"], 2 if stage > 0 and b == 0 else 1)
                channels = block.out_channels
                blocks.append(block)
        self.blocks = nn.ModuleList(blocks)
        self.fc = nn.Linear(channels, c["num_classes"])

    def forward(self, images):
        x = torch.relu(self.stem_bn(self.stem_conv(images)))
        x = F.max_pool2d(x, kernel_size=3, stride=2, padding=1)
        for block in self.blocks:
            x = block(x)
        return self.fc(F.adaptive_avg_pool2d(x, (1, 1)).flatten(1))


# --- LLaMA-style decoder (examples/models/llama.cpp) ----------------------------------------------

def _rotate_half(x):
    half = x.size(-1) // 2
    return torch.cat([-x.narrow(-1, half, half), x.narrow(-1, 0, half)], -1)


def _repeat_kv(x, n_rep):
    if n_rep == 1:
        return x
    b, kv, s, d = x.size(0), x.size(1), x.size(2), x.size(3)
    return x.unsqueeze(2).expand(b, kv, n_rep, s, d).reshape(b, kv * n_rep, s, d)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class LlamaAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.num_heads, self.num_kv_heads = c["num_heads"], c["num_kv_heads"]
        self.head_dim = c["hidden_size"] // c["num_heads"]
        h = c["hidden_size"]
        self.q_proj = nn.Linear(h, self.num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(h, self.num_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(h, self.num_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, h, bias=False)

    def _rotated_projections(self, x, cos, sin):
        batch, seq = x.size(0), x.size(1)
        q = self.q_proj(x).view(batch, seq, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(batch, seq, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(batch, seq, self.num_kv_heads, self.head_dim).transpose(1, 2)
        return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin, v

    def _attend(self, q, keys, values, mask):
        batch, seq = q.size(0), q.size(2)
        n_rep = self.num_heads // self.num_kv_heads
        keys, values = _repeat_kv(keys, n_rep), _repeat_kv(values, n_rep)
        scores = torch.matmul(q, keys.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))
        probs = torch.softmax(scores + mask, -1)
        out = torch.matmul(probs, values).transpose(1, 2).reshape(batch, seq, self.num_heads * self.head_dim)
        return self.o_proj(out)

    def forward(self, x, cos, sin, mask, past_k, past_v):
        q, k, v = self._rotated_projections(x, cos, sin)
        new_k, new_v = torch.cat([past_k, k], 2), torch.cat([past_v, v], 2)
        return self._attend(q, new_k, new_v, mask), new_k, new_v

    def forward_cached(self, x, cos, sin, mask, positions, cache_k, cache_v):
        q, k, v = self._rotated_projections(x, cos, sin)
        cache_k.index_copy_(2, positions, k)
        cache_v.index_copy_(2, positions, v)
        return self._attend(q, cache_k, cache_v, mask)


class LlamaMlp(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.w1 = nn.Linear(c["hidden_size"], c["intermediate_size"], bias=False)
        self.w2 = nn.Linear(c["intermediate_size"], c["hidden_size"], bias=False)
        self.w3 = nn.Linear(c["hidden_size"], c["intermediate_size"], bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.attention_norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.attention = LlamaAttention(c)
        self.mlp_norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.mlp = LlamaMlp(c)

    def forward(self, x, cos, sin, mask, past_k, past_v):
        attn, new_k, new_v = self.attention(self.attention_norm(x), cos, sin, mask, past_k, past_v)
        x = x + attn
        return x + self.mlp(self.mlp_norm(x)), new_k, new_v

    def forward_cached(self, x, cos, sin, mask, positions, cache_k, cache_v):
        x = x + self.attention.forward_cached(self.attention_norm(x), cos, sin, mask, positions, cache_k, cache_v)
        return x + self.mlp(self.mlp_norm(x))


class Llama(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList(LlamaDecoderLayer(c) for _ in range(c["num_layers"]))
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.lm_head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)

    def _rotary_tables(self, positions, dtype):
        head_dim = self.c["hidden_size"] // self.c["num_heads"]
        inv_freq = torch.pow(self.c["rope_theta"],
                             torch.arange(0, head_dim, 2, dtype=torch.float32, device=positions.device) / head_dim)
        angles = torch.outer(positions, inv_freq.reciprocal())
        emb = torch.cat([angles, angles], -1)
        return emb.cos().to(dtype), emb.sin().to(dtype)

    def forward(self, tokens, past_k, past_v):
        seq, past = tokens.size(1), past_k.size(3)
        x = self.embed_tokens(tokens)
        cos, sin = self._rotary_tables(torch.arange(past, past + seq, dtype=torch.float32, device=tokens.device), x.dtype)
        # Key j is hidden from query i (at absolute position past + i) when j > past + i.
        query_pos = torch.arange(seq, device=tokens.device).unsqueeze(1) + past
        key_pos = torch.arange(past + seq, device=tokens.device).unsqueeze(0)
        mask = torch.where(key_pos > query_pos, mask_fill_value(x.dtype), 0.0).to(x.dtype)
        new_ks, new_vs = [], []
        for i, layer in enumerate(self.layers):
            x, k, v = layer(x, cos, sin, mask, past_k.select(0, i), past_v.select(0, i))
            new_ks.append(k)
            new_vs.append(v)
        return self.lm_head(self.norm(x)), torch.stack(new_ks, 0), torch.stack(new_vs, 0)

    def forward_cached(self, tokens, positions, cache_k, cache_v):
        """The static-cache form (LlamaImpl::forward_cached): caches [layers, B, kv_heads, max_len,
        head_dim] written in place at `positions`, attention over every slot, the unwritten masked."""
        x = self.embed_tokens(tokens)
        cos, sin = self._rotary_tables(positions.to(torch.float32), x.dtype)
        slots = torch.arange(cache_k.size(3), device=tokens.device).unsqueeze(0)
        mask = torch.zeros(tokens.size(1), cache_k.size(3), dtype=x.dtype, device=x.device).masked_fill(
            slots > positions.unsqueeze(1), mask_fill_value(x.dtype))
        for i, layer in enumerate(self.layers):
            x = layer.forward_cached(x, cos, sin, mask, positions, cache_k.select(0, i), cache_v.select(0, i))
        return self.lm_head(self.norm(x))


class LlamaStaticCache(nn.Module):
    """A Llama whose forward is its static-cache form (LlamaStaticCacheImpl)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, tokens, positions, cache_k, cache_v):
        return self.model.forward_cached(tokens, positions, cache_k, cache_v)


_LLAMA_LAYER_TO_HF = {
    "attention_norm.weight": "input_layernorm.weight",
    "mlp_norm.weight": "post_attention_layernorm.weight",
    "attention.q_proj.weight": "self_attn.q_proj.weight",
    "attention.k_proj.weight": "self_attn.k_proj.weight",
    "attention.v_proj.weight": "self_attn.v_proj.weight",
    "attention.o_proj.weight": "self_attn.o_proj.weight",
    "mlp.w1.weight": "mlp.gate_proj.weight",
    "mlp.w2.weight": "mlp.down_proj.weight",
    "mlp.w3.weight": "mlp.up_proj.weight",
}


def llama_hf_name(name):
    """The Hugging Face checkpoint name of a Llama parameter (the C++ loader maps it back)."""
    if name in ("embed_tokens.weight", "norm.weight"):
        return "model." + name
    if name == "lm_head.weight":
        return name
    _, index, rest = name.split(".", 2)
    return f"model.layers.{index}.{_LLAMA_LAYER_TO_HF[rest]}"


def llama_zoo_name(hf_name):
    """The inverse of llama_hf_name."""
    inverse = {v: k for k, v in _LLAMA_LAYER_TO_HF.items()}
    if hf_name.startswith("model.layers."):
        _, _, index, rest = hf_name.split(".", 3)
        return f"layers.{index}.{inverse[rest]}"
    return hf_name[len("model."):] if hf_name.startswith("model.") else hf_name
