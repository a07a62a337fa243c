#!/usr/bin/env python3
"""make_goldens.py — tiny random-weight checkpoints plus reference outputs from HF transformers.

Purpose
    sluice must produce the same logits as the reference implementation. This script builds tiny
    dense Qwen2 / Qwen3 / Qwen2-MoE / Qwen3-MoE / Qwen3-Next / Qwen3.5-MoE / GLM-4.5-MoE / Mixtral / DeepSeek-V3 /
    gpt-oss models with seeded random weights, writes each one as a
    checkpoint in the layout under test (HF bf16, MLX affine-quantised as mlx-lm writes it, or gpt-oss's
    MXFP4 experts as the Hub ships them), loads
    the exact stored values back into the transformers model (in float32, on the CPU), and records what
    transformers computes.

How to run (needs torch, transformers >= 5 with qwen2 / qwen2_moe / qwen3 / qwen3_moe / qwen3_next / qwen3_5_moe / glm4_moe / mixtral / deepseek_v3 / gpt_oss, numpy)
    python3 tools/make_goldens.py --out tests/data/goldens            # all goldens
    python3 tools/make_goldens.py --out DIR --only qwen3_next_hf_bf16  # one golden (the index keeps
                                                                       # the others listed)
    python3 tools/make_goldens.py --save-configs tests/data/configs/transformers --only none
                                      # every golden's config as save_pretrained writes it
    python3 tools/make_goldens.py --selftest                           # numpy-only checks of the
                                                                       # quantisers, packers, writer
    python3 tools/make_goldens.py --numpy-reference --only NAME        # PROVISIONAL golden without
        # transformers (families in NUMPY_PARAM_SHAPES: gpt_oss): the same checkpoint, the reference from
        # tools/check_goldens.py's numpy model, golden.json "reference" saying so, listed under the index's
        # "provisional" (the C++ tests iterate "goldens" only); a transformers run replaces every file
    Optional: --dump-sources DIR copies the installed modeling_/configuration_ files of the three
    families (for reading the reference source where transformers is not installed).
    Outputs are deterministic for a given transformers/torch version (fixed seeds; weights are drawn
    with numpy's PCG64 seeded from the golden name and the parameter name, not by torch's init).

What it writes, per golden NAME (under --out):
    NAME/config.json          the config in the layout under test (HF style, or mlx-lm style with a
                              "quantization" block and its "quantization_config" copy)
    NAME/model.safetensors    the checkpoint (HF: per-expert or fused experts as the real checkpoints;
                              MLX: stacked switch_mlp experts, U32 codes + BF16 scales/biases;
                              MXFP4: gpt-oss's NAME_blocks / NAME_scales U8 experts, the rest BF16)
    NAME/golden.safetensors   input_ids I32 [T]; logits F32 [T,V] (one prefill); greedy_ids I32 [12];
                              greedy_logits F32 [12,V] (row 0 = last prefill row, rows 1..11 from
                              step-by-step decode with the cache, via generate()); hidden_L F32 [T,H]
                              (output of decoder layer L for the prompt)
    NAME/golden.json          family, layout, bits, group size, versions, GDN path that ran, checks
    index.json                list of all goldens
    tools/check_goldens.py re-derives every golden with a numpy forward pass written from the spec.

Design notes
    * The reference model always runs in float32 on the CPU with eager attention; the GDN fast kernels
      (FLA, causal-conv1d) are disabled before the model is built so the torch fallbacks
      (torch_chunk_gated_delta_rule for prefill, torch_recurrent_gated_delta_rule for decode) run;
      call counters around them are recorded in golden.json.
    * The reference weights are read back from the stored checkpoint through an independent reader
      (dequantise, un-stack, undo the folded +1, un-transpose conv1d) — the same inverse a loader
      does — so a layout bug shows up as a mismatch between this script's reader and writer, and the
      HF-layout checkpoints are additionally re-loaded with from_pretrained and compared (MXFP4: through
      transformers' Mxfp4Config(dequantize=True) loader, whose experts must equal ours bit for bit).
    * Rejected alternative: save_pretrained(). transformers 5 keeps experts fused in memory and its
      save path may or may not undo that; writing the safetensors by hand pins the layout exactly.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import platform
import re
import shutil
import struct
import sys
import time
import traceback

import numpy as np

PROMPT_LEN = 137  # > 2 chunks of 64: crosses two chunk boundaries of the chunked DeltaNet
N_GREEDY = 12
MASTER_SEED = 20261130

# ----------------------------------------------------------------------------------------------
# bf16 helpers (numpy has no bfloat16: BF16 tensors are carried as their uint16 bit patterns)
# ----------------------------------------------------------------------------------------------


def f32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """Round-to-nearest-even float32 -> bfloat16 bit pattern (no NaNs expected)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounding = ((u >> 16) & 1) + 0x7FFF
    return ((u + rounding) >> 16).astype(np.uint16)


def bf16_bits_to_f32(b: np.ndarray) -> np.ndarray:
    return (b.astype(np.uint32) << 16).view(np.float32)


def round_bf16(x: np.ndarray) -> np.ndarray:
    return bf16_bits_to_f32(f32_to_bf16_bits(x))


# ----------------------------------------------------------------------------------------------
# MLX affine quantisation (models.md §5.1-5.2; ml-explore/mlx mlx/ops.cpp affine_quantize fallback)
# ----------------------------------------------------------------------------------------------


def mlx_affine_quantize(w: np.ndarray, bits: int, group_size: int):
    """w: float32 [..., in] (values already bf16-representable). Returns (packed U32, scales bf16
    bits, biases bf16 bits). Scales/biases are computed in f32 then cast to bf16 (the weight dtype),
    codes are computed with the f32 scales, as MLX does."""
    assert bits in (2, 4, 8), bits
    assert w.shape[-1] % group_size == 0, (w.shape, group_size)
    w = w.astype(np.float32)
    g = w.reshape(*w.shape[:-1], w.shape[-1] // group_size, group_size)
    n_bins = np.float32((1 << bits) - 1)
    w_max = g.max(axis=-1, keepdims=True)
    w_min = g.min(axis=-1, keepdims=True)
    mask = np.abs(w_min) > np.abs(w_max)
    scales = np.maximum((w_max - w_min) / n_bins, np.float32(1e-7)).astype(np.float32)
    scales = np.where(mask, scales, -scales).astype(np.float32)
    edge = np.where(mask, w_min, w_max).astype(np.float32)
    q0 = np.rint(edge / scales).astype(np.float32)
    scales = np.where(q0 != 0, edge / np.where(q0 != 0, q0, 1), scales).astype(np.float32)
    biases = np.where(q0 == 0, np.float32(0), edge).astype(np.float32)
    q = np.clip(np.rint((g - biases) / scales), 0, n_bins).astype(np.uint32)
    q = q.reshape(w.shape)
    packed = pack_codes(q, bits)
    return packed, f32_to_bf16_bits(scales[..., 0]), f32_to_bf16_bits(biases[..., 0])


def pack_codes(q: np.ndarray, bits: int) -> np.ndarray:
    """LSB-first packing of b-bit codes into uint32 along the last axis."""
    per = 32 // bits
    assert q.shape[-1] % per == 0
    qq = q.reshape(*q.shape[:-1], q.shape[-1] // per, per).astype(np.uint64)
    word = np.zeros(qq.shape[:-1], dtype=np.uint64)
    for j in range(per):
        word |= qq[..., j] << np.uint64(bits * j)
    return word.astype(np.uint32)


def unpack_codes(words: np.ndarray, bits: int) -> np.ndarray:
    """Inverse of pack_codes, written per element from the spec: q_i = (w[i/per] >> (b*(i%per))) & m."""
    per = 32 // bits
    n = words.shape[-1] * per
    idx = np.arange(n)
    w = words[..., idx // per].astype(np.uint64)
    shift = (bits * (idx % per)).astype(np.uint64)
    return ((w >> shift) & np.uint64((1 << bits) - 1)).astype(np.uint32)


def mlx_dequantize(words, scales_bits, biases_bits, bits, group_size) -> np.ndarray:
    q = unpack_codes(words, bits).astype(np.float32)
    s = np.repeat(bf16_bits_to_f32(scales_bits), group_size, axis=-1)
    b = np.repeat(bf16_bits_to_f32(biases_bits), group_size, axis=-1)
    assert s.shape == q.shape, (s.shape, q.shape)
    return (s * q + b).astype(np.float32)


# ----------------------------------------------------------------------------------------------
# MXFP4 (OCP microscaling FP4, as the gpt-oss Hub checkpoints store their experts): blocks of 32 values
# along a weight row share one E8M0 scale byte (2^(s - 127)); each value is an FP4 E2M1 code, two per
# byte, element 2j in the low nibble and 2j+1 in the high one. transformers' convert_moe_packed_tensors
# decodes them with the lookup table below.
# ----------------------------------------------------------------------------------------------

FP4_VALUES = np.array([+0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0],
                      dtype=np.float32)
MXFP4_BLOCK = 32


def mxfp4_quantize(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """w: float [..., cols] (cols % 32 == 0) -> (blocks U8 [..., cols/32, 16], scales U8 [..., cols/32]).
    Each block takes the smallest power of two that brings its largest magnitude within FP4's 6, and
    each value the nearest FP4 magnitude (ties to the smaller) with the input's sign bit."""
    assert w.shape[-1] % MXFP4_BLOCK == 0, w.shape
    g = w.astype(np.float64).reshape(*w.shape[:-1], w.shape[-1] // MXFP4_BLOCK, MXFP4_BLOCK)
    amax = np.abs(g).max(axis=-1)
    e = np.where(amax > 0, np.ceil(np.log2(np.maximum(amax, 1e-300) / 6.0)), 0.0)
    e = np.clip(e, -127, 127).astype(np.int32)
    x = g / np.exp2(e.astype(np.float64))[..., None]
    mags = FP4_VALUES[:8].astype(np.float64)
    idx = np.abs(np.abs(x)[..., None] - mags).argmin(axis=-1).astype(np.uint8)  # first = smaller on ties
    codes = idx | np.where(np.signbit(x), np.uint8(8), np.uint8(0)).astype(np.uint8)
    blocks = (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)
    return blocks, (e + 127).astype(np.uint8)


def mxfp4_dequantize(blocks: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """Inverse of mxfp4_quantize, from the spec: [..., n, 16] bytes + [..., n] scales -> f32 [..., n*32];
    value = ldexp(FP4_VALUES[nibble], scale - 127)."""
    assert blocks.shape[:-1] == scales.shape and blocks.shape[-1] == MXFP4_BLOCK // 2, (blocks.shape, scales.shape)
    codes = np.empty(blocks.shape[:-1] + (MXFP4_BLOCK,), dtype=np.uint8)
    codes[..., 0::2] = blocks & 0x0F
    codes[..., 1::2] = blocks >> 4
    vals = np.ldexp(FP4_VALUES[codes], (scales.astype(np.int32) - 127)[..., None])
    return vals.reshape(*blocks.shape[:-2], blocks.shape[-2] * MXFP4_BLOCK).astype(np.float32)


# ----------------------------------------------------------------------------------------------
# safetensors writer / reader (little-endian, header padded with spaces to 8 bytes)
# ----------------------------------------------------------------------------------------------

_NP_OF = {"F32": np.float32, "BF16": np.uint16, "U32": np.uint32, "I32": np.int32, "U8": np.uint8}


def write_safetensors(path: str, tensors: dict, metadata: dict | None) -> None:
    """tensors: name -> (dtype string, numpy array). BF16 arrays are uint16 bit patterns."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        dt, arr = tensors[name]
        arr = np.ascontiguousarray(arr, dtype=np.dtype(_NP_OF[dt]).newbyteorder("<"))
        b = arr.tobytes()
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    if metadata:
        header = {"__metadata__": metadata, **header}
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * ((8 - len(hb) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for b in blobs:
            f.write(b)


def read_safetensors(path: str) -> tuple[dict, dict]:
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8 : 8 + n])
    meta = header.pop("__metadata__", {})
    base = 8 + n
    out = {}
    for name, h in header.items():
        b, e = h["data_offsets"]
        arr = np.frombuffer(data[base + b : base + e], dtype=np.dtype(_NP_OF[h["dtype"]]).newbyteorder("<"))
        out[name] = (h["dtype"], arr.reshape(h["shape"]).copy())
    return out, meta


# ----------------------------------------------------------------------------------------------
# Golden definitions
# ----------------------------------------------------------------------------------------------

# Qwen3-Next / Qwen3.5 norms that are zero-centred (1+w) in HF and get the +1 folded in by mlx-lm.
_ZC_NORM_SUFFIXES = (
    ".input_layernorm.weight",
    ".post_attention_layernorm.weight",
    "model.norm.weight",
    ".q_norm.weight",
    ".k_norm.weight",
    "mtp.norm.weight",
    "mtp.pre_fc_norm_embedding.weight",
    "mtp.pre_fc_norm_hidden.weight",
)


def _qwen3_moe_cfg(h, nh, nkv, hd, moe_i, e, k, v, layers, norm_topk):
    return {
        "architectures": ["Qwen3MoeForCausalLM"],
        "model_type": "qwen3_moe",
        "vocab_size": v,
        "hidden_size": h,
        "intermediate_size": 2 * h,
        "moe_intermediate_size": moe_i,
        "num_hidden_layers": layers,
        "num_attention_heads": nh,
        "num_key_value_heads": nkv,
        "head_dim": hd,
        "num_experts": e,
        "num_experts_per_tok": k,
        "norm_topk_prob": norm_topk,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "rope_scaling": None,
        "max_position_embeddings": 4096,
        "attention_bias": False,
        "tie_word_embeddings": False,
        "use_cache": True,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "bfloat16",
    }


def _qwen3_cfg(h, nh, nkv, hd, inter, v, layers, tied):
    """Dense Qwen3 (Qwen3ForCausalLM: Qwen3-0.6B ... 32B): Qwen3-MoE's attention with a dense SwiGLU MLP
    in every layer; the small sizes tie the LM head to the embedding."""
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "vocab_size": v,
        "hidden_size": h,
        "intermediate_size": inter,
        "num_hidden_layers": layers,
        "num_attention_heads": nh,
        "num_key_value_heads": nkv,
        "head_dim": hd,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "rope_scaling": None,
        "max_position_embeddings": 4096,
        "attention_bias": False,
        "use_sliding_window": False,
        "sliding_window": None,
        "max_window_layers": layers,
        "tie_word_embeddings": tied,
        "use_cache": True,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "bfloat16",
    }


def _qwen2_cfg(h, nh, nkv, inter, v, layers, tied):
    """Dense Qwen2 / Qwen2.5 (Qwen2ForCausalLM: Qwen2.5-0.5B ... 72B): biases on q/k/v (not o), no q/k
    norm, head_dim = hidden / heads, a dense SwiGLU MLP; the small sizes tie the LM head."""
    return {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "vocab_size": v,
        "hidden_size": h,
        "intermediate_size": inter,
        "num_hidden_layers": layers,
        "num_attention_heads": nh,
        "num_key_value_heads": nkv,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "rope_scaling": None,
        "max_position_embeddings": 4096,
        "use_sliding_window": False,
        "sliding_window": None,
        "max_window_layers": layers,
        "tie_word_embeddings": tied,
        "use_cache": True,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "bfloat16",
    }


def _qwen2_moe_cfg(h, nh, nkv, inter, moe_i, sh_i, e, k, v, layers, norm_topk, sparse_step, mlp_only):
    """Qwen1.5-MoE / Qwen2-57B-A14B (Qwen2MoeForCausalLM): Qwen2's attention (biases on q/k/v, no q/k norm,
    head_dim = hidden / heads), a softmax router, a shared expert gated by sigmoid(shared_expert_gate);
    decoder_sparse_step / mlp_only_layers make some layers dense (intermediate_size)."""
    return {
        "architectures": ["Qwen2MoeForCausalLM"],
        "model_type": "qwen2_moe",
        "vocab_size": v,
        "hidden_size": h,
        "intermediate_size": inter,
        "moe_intermediate_size": moe_i,
        "shared_expert_intermediate_size": sh_i,
        "num_hidden_layers": layers,
        "num_attention_heads": nh,
        "num_key_value_heads": nkv,
        "num_experts": e,
        "num_experts_per_tok": k,
        "norm_topk_prob": norm_topk,
        "decoder_sparse_step": sparse_step,
        "mlp_only_layers": mlp_only,
        "qkv_bias": True,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "rope_scaling": None,
        "max_position_embeddings": 4096,
        "use_sliding_window": False,
        "sliding_window": None,
        "max_window_layers": layers,
        "tie_word_embeddings": False,
        "use_cache": True,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "bfloat16",
    }


def _mixtral_cfg(h, nh, nkv, hd, inter, e, k, v, layers):
    """Mixtral 8x7B / 8x22B (MixtralForCausalLM): Llama's attention (no biases, no q/k norm, full RoPE),
    a softmax router whose top-k are renormalised, experts of intermediate_size, no shared expert."""
    return {
        "architectures": ["MixtralForCausalLM"],
        "model_type": "mixtral",
        "vocab_size": v,
        "hidden_size": h,
        "intermediate_size": inter,
        "num_hidden_layers": layers,
        "num_attention_heads": nh,
        "num_key_value_heads": nkv,
        "head_dim": hd,
        "num_local_experts": e,
        "num_experts_per_tok": k,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "rope_theta": 1000000.0,
        "max_position_embeddings": 4096,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "use_cache": True,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "bfloat16",
    }


def _glm4_moe_cfg(h, nh, nkv, hd, inter, moe_i, e, k, groups, topk_groups, scale, v, layers, qk_norm, nextn):
    """GLM-4.5 / 4.6 / 4.5-Air (Glm4MoeForCausalLM): q/k/v biases, optional q/k norms, RoPE on half of
    each head, a sigmoid router whose e_score_correction_bias chooses (group-limited), one ungated
    shared expert, a dense first layer; num_nextn_predict_layers MTP layers after the decoder's."""
    return {
        "architectures": ["Glm4MoeForCausalLM"],
        "model_type": "glm4_moe",
        "vocab_size": v,
        "hidden_size": h,
        "intermediate_size": inter,
        "moe_intermediate_size": moe_i,
        "num_hidden_layers": layers,
        "num_attention_heads": nh,
        "num_key_value_heads": nkv,
        "head_dim": hd,
        "partial_rotary_factor": 0.5,
        "n_routed_experts": e,
        "num_experts_per_tok": k,
        "n_shared_experts": 1,
        "n_group": groups,
        "topk_group": topk_groups,
        "routed_scaling_factor": scale,
        "norm_topk_prob": True,
        "first_k_dense_replace": 1,
        "num_nextn_predict_layers": nextn,
        "use_qk_norm": qk_norm,
        "attention_bias": True,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "rope_theta": 1000000.0,
        "rope_scaling": None,
        "max_position_embeddings": 4096,
        "tie_word_embeddings": False,
        "use_cache": True,
        "bos_token_id": None,
        "eos_token_id": [2, 3],
        "pad_token_id": 0,
        "torch_dtype": "bfloat16",
    }


def _deepseek_v3_cfg(h, nh, q_lora, kv_lora, nope, rope, vdim, inter, moe_i, e, k, groups, topk_groups, scale,
                     shared, norm_topk, first_dense, interleave, v, layers, nextn, yarn):
    """DeepSeek-V3 / R1 / V3.1 and Kimi K2 (DeepseekV3ForCausalLM): multi-head latent attention — q through
    q_a_proj -> q_a_layernorm -> q_b_proj (or a plain q_proj when q_lora_rank is null), keys and values
    through kv_a_proj_with_mqa -> a kv_lora_rank latent (kv_a_layernorm) + one shared rope key -> kv_b_proj;
    RoPE on the qk_rope_head_dim part only (interleaved pairs with rope_interleave); a sigmoid router whose
    e_score_correction_bias chooses, group-limited top-k, routed_scaling_factor; n_shared_experts ungated
    shared experts; dense layers before first_k_dense_replace. yarn: a rope_parameters block (YaRN with
    DeepSeek's mscale / mscale_all_dim, which also scale the softmax) or None."""
    d = {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "vocab_size": v,
        "hidden_size": h,
        "intermediate_size": inter,
        "moe_intermediate_size": moe_i,
        "num_hidden_layers": layers,
        "num_attention_heads": nh,
        "num_key_value_heads": nh,
        "q_lora_rank": q_lora,
        "kv_lora_rank": kv_lora,
        "qk_nope_head_dim": nope,
        "qk_rope_head_dim": rope,
        "v_head_dim": vdim,
        "n_routed_experts": e,
        "num_experts_per_tok": k,
        "n_shared_experts": shared,
        "n_group": groups,
        "topk_group": topk_groups,
        "topk_method": "noaux_tc",
        "scoring_func": "sigmoid",
        "routed_scaling_factor": scale,
        "norm_topk_prob": norm_topk,
        "first_k_dense_replace": first_dense,
        "moe_layer_freq": 1,
        "num_nextn_predict_layers": nextn,
        "rope_interleave": interleave,
        "attention_bias": False,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": 4096,
        "tie_word_embeddings": False,
        "use_cache": True,
        "bos_token_id": 0,
        "eos_token_id": 1,
        "torch_dtype": "bfloat16",
    }
    if yarn is None:
        d["rope_theta"] = 10000.0
    else:
        d["max_position_embeddings"] = 256
        d["rope_parameters"] = yarn
    return d


def _qwen3_next_cfg(h, nh, nkv, hd, nk, nv, dk, dv, moe_i, sh_i, e, k, v, layers, interval):
    return {
        "architectures": ["Qwen3NextForCausalLM"],
        "model_type": "qwen3_next",
        "vocab_size": v,
        "hidden_size": h,
        "intermediate_size": 2 * h,
        "num_hidden_layers": layers,
        "num_attention_heads": nh,
        "num_key_value_heads": nkv,
        "head_dim": hd,
        "full_attention_interval": interval,
        "linear_num_key_heads": nk,
        "linear_num_value_heads": nv,
        "linear_key_head_dim": dk,
        "linear_value_head_dim": dv,
        "linear_conv_kernel_dim": 4,
        "num_experts": e,
        "num_experts_per_tok": k,
        "moe_intermediate_size": moe_i,
        "shared_expert_intermediate_size": sh_i,
        "norm_topk_prob": True,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000000.0,
        "partial_rotary_factor": 0.25,
        "rope_scaling": None,
        "max_position_embeddings": 4096,
        "attention_bias": False,
        "tie_word_embeddings": False,
        "use_cache": True,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "bfloat16",
    }


def _qwen3_5_moe_cfg(h, nh, nkv, hd, nk, nv, dk, dv, moe_i, sh_i, e, k, v, layers):
    rot = int(hd * 0.25) // 2  # frequency slots; mrope_section must sum to it
    sec = [rot - 2 * (rot // 3), rot // 3, rot // 3]
    text = {
        "model_type": "qwen3_5_moe_text",
        "vocab_size": v,
        "hidden_size": h,
        "num_hidden_layers": layers,
        "num_attention_heads": nh,
        "num_key_value_heads": nkv,
        "head_dim": hd,
        "full_attention_interval": 4,
        "layer_types": ["linear_attention" if (i + 1) % 4 else "full_attention" for i in range(layers)],
        "linear_num_key_heads": nk,
        "linear_num_value_heads": nv,
        "linear_key_head_dim": dk,
        "linear_value_head_dim": dv,
        "linear_conv_kernel_dim": 4,
        "num_experts": e,
        "num_experts_per_tok": k,
        "moe_intermediate_size": moe_i,
        "shared_expert_intermediate_size": sh_i,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "attn_output_gate": True,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 10000000.0,
            "partial_rotary_factor": 0.25,
            "mrope_section": sec,
            "mrope_interleaved": True,
        },
        "max_position_embeddings": 4096,
        "attention_bias": False,
        "tie_word_embeddings": False,
        "use_cache": True,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "mtp_num_hidden_layers": 1,
        "dtype": "bfloat16",
    }
    vision = {
        "depth": 1,
        "hidden_size": 32,
        "hidden_act": "gelu_pytorch_tanh",
        "intermediate_size": 64,
        "num_heads": 2,
        "in_channels": 3,
        "patch_size": 4,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "out_hidden_size": h,
        "num_position_embeddings": 16,
        "deepstack_visual_indexes": [],
    }
    return {
        "architectures": ["Qwen3_5MoeForConditionalGeneration"],
        "model_type": "qwen3_5_moe",
        "text_config": text,
        "vision_config": vision,
        "image_token_id": v - 4,
        "video_token_id": v - 3,
        "vision_start_token_id": v - 2,
        "vision_end_token_id": v - 1,
        "tie_word_embeddings": False,
    }


def _gpt_oss_cfg(h, nh, nkv, hd, inter, e, k, v, layers, window):
    """gpt-oss-20b / 120b (GptOssForCausalLM): q/k/v/o biases, a learned per-head attention sink in the
    softmax denominator, layers alternating sliding-window / full attention (layer 0 sliding), NeoX RoPE
    over the whole head with YaRN (factor 32 over 4096 positions, truncate false), a router with a bias
    whose top-k logits are softmaxed, experts of intermediate_size with biases, interleaved gate/up columns
    and the clamped (up + 1) * gate * sigmoid(1.702 gate) activation. experts_per_token and swiglu_limit
    as the Hub's config.json carries them beside transformers' names."""
    return {
        "architectures": ["GptOssForCausalLM"],
        "model_type": "gpt_oss",
        "vocab_size": v,
        "hidden_size": h,
        "intermediate_size": inter,
        "num_hidden_layers": layers,
        "num_attention_heads": nh,
        "num_key_value_heads": nkv,
        "head_dim": hd,
        "num_local_experts": e,
        "num_experts_per_tok": k,
        "experts_per_token": k,
        "swiglu_limit": 7.0,
        "layer_types": ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers)],
        "sliding_window": window,
        "rope_parameters": {
            "rope_type": "yarn",
            "factor": 32.0,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "truncate": False,
            "original_max_position_embeddings": 4096,
            "rope_theta": 150000.0,
        },
        "max_position_embeddings": 131072,
        "rms_norm_eps": 1e-5,
        "attention_bias": True,
        "attention_dropout": 0.0,
        "hidden_act": "silu",
        "router_aux_loss_coef": 0.9,
        "output_router_logits": False,
        "tie_word_embeddings": False,
        "use_cache": True,
        "bos_token_id": None,
        "eos_token_id": 2,
        "pad_token_id": 1,
        "torch_dtype": "bfloat16",
    }


# The Hub's gpt-oss config.json: experts MXFP4, everything else bf16.
GPT_OSS_MXFP4_QUANT = {
    "quant_method": "mxfp4",
    "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"],
}

GPT_OSS_NOTES = (
    "q/k/v/o biases and the router bias N(0, 0.5), expert biases N(0, 0.5), self_attn.sinks N(0, 1) (a raw "
    "logit in each head's softmax denominator), head_dim 16, GQA 4/2, layers 0 and 2 sliding_attention with "
    "sliding_window 6 < the 137-token prompt, 1 and 3 full; YaRN factor 32 (truncate false: the ramp's "
    "ends not rounded; cos/sin x 0.1 ln 32 + 1); top-4 of 8 experts, softmax over the 4 chosen logits; "
    "gate_up_proj [E, H, 2I] input-major with gate j in column 2j and up j in 2j+1, drawn N(0, 3/sqrt(H)) so "
    "the clamp at 7 clips some gate and up values"
)

GOLDENS = [
    {
        "name": "qwen3_hf_bf16",
        "family": "qwen3",
        "layout": "hf",
        "config": _qwen3_cfg(h=64, nh=4, nkv=2, hd=32, inter=96, v=256, layers=3, tied=False),
        "config_writer": "save_pretrained",
        "notes": "dense Qwen3 (no experts: a SwiGLU mlp.gate_proj/up_proj/down_proj in every layer); "
        "head_dim 32 != hidden/heads 16; intermediate 96; config.json as transformers' save_pretrained writes it",
    },
    {
        "name": "qwen3_mlx_q4",
        "family": "qwen3",
        "layout": "mlx",
        "bits": 4,
        "group_size": 32,
        "config": _qwen3_cfg(h=64, nh=4, nkv=2, hd=32, inter=128, v=256, layers=3, tied=True),
        "config_writer": "save_pretrained",
        "notes": "dense Qwen3 as mlx-lm writes a small one (Qwen3-0.6B..4B): tie_word_embeddings true, so no "
        "lm_head tensor and the quantised embed_tokens is also the LM head; 4-bit gs32, bf16 scales/biases; "
        "config.json as save_pretrained writes it plus mlx-lm's quantization block",
    },
    {
        "name": "qwen2_hf_bf16",
        "family": "qwen2",
        "layout": "hf",
        "config": _qwen2_cfg(h=128, nh=4, nkv=2, inter=192, v=256, layers=3, tied=False),
        "config_writer": "save_pretrained",
        "notes": "dense Qwen2/Qwen2.5: q/k/v projections with biases (drawn N(0, 0.5): real Qwen2.5 k biases "
        "are large), no q/k norm, head_dim = hidden / heads = 32 (a multiple of the compressed KV types' "
        "group), intermediate 192; config.json as save_pretrained writes it",
    },
    {
        "name": "qwen2_mlx_q4",
        "family": "qwen2",
        "layout": "mlx",
        "bits": 4,
        "group_size": 32,
        "config": _qwen2_cfg(h=128, nh=4, nkv=2, inter=256, v=256, layers=3, tied=True),
        "config_writer": "save_pretrained",
        "notes": "dense Qwen2.5 as mlx-lm writes a small one (Qwen2.5-0.5B..3B): tied embeddings (the quantised "
        "embed_tokens is also the LM head), q/k/v .bias kept bf16 beside the quantised weight's "
        ".scales/.biases; 4-bit gs32",
    },
    {
        "name": "mixtral_hf_bf16",
        "family": "mixtral",
        "layout": "hf",
        "config": _mixtral_cfg(h=64, nh=4, nkv=2, hd=32, inter=48, e=8, k=2, v=256, layers=3),
        "config_writer": "save_pretrained",
        "notes": "Mixtral 8x7B in miniature: block_sparse_moe.experts.E.w1/w3/w2 per expert, block_sparse_moe.gate, "
        "top-2 of 8 renormalised, head_dim 32 != hidden/heads 16, no q/k norm, no biases",
    },
    {
        "name": "mixtral_mlx_q4",
        "family": "mixtral",
        "layout": "mlx",
        "bits": 4,
        "group_size": 64,
        "config": _mixtral_cfg(h=128, nh=4, nkv=2, hd=32, inter=64, e=8, k=2, v=256, layers=3),
        "config_writer": "save_pretrained",
        "notes": "mlx-lm layout: block_sparse_moe.switch_mlp stacked experts (w1 -> gate_proj, w3 -> up_proj, "
        "w2 -> down_proj), the router 4-bit like the rest (mixtral.py has no quant_predicate)",
    },
    {
        "name": "qwen2_moe_hf_bf16",
        "family": "qwen2_moe",
        "layout": "hf",
        "config": _qwen2_moe_cfg(h=128, nh=4, nkv=2, inter=160, moe_i=48, sh_i=96, e=8, k=2, v=256, layers=4,
                                 norm_topk=False, sparse_step=1, mlp_only=[2]),
        "config_writer": "save_pretrained",
        "notes": "Qwen1.5-MoE shapes in miniature: q/k/v biases (N(0, 0.5)), no q/k norm, head_dim 32 = hidden/heads, "
        "top-2 of 8 NOT renormalised, a shared expert (96) gated by sigmoid(shared_expert_gate), layer 2 dense "
        "via mlp_only_layers (intermediate 160); per-expert tensors",
    },
    {
        "name": "qwen2_moe_mlx_q4",
        "family": "qwen2_moe",
        "layout": "mlx",
        "bits": 4,
        "group_size": 64,
        "config": _qwen2_moe_cfg(h=128, nh=4, nkv=2, inter=256, moe_i=64, sh_i=128, e=8, k=4, v=256, layers=3,
                                 norm_topk=False, sparse_step=1, mlp_only=[]),
        "config_writer": "save_pretrained",
        "notes": "mlx-lm layout (qwen2_moe.py has no quant_predicate: the router and the shared-expert gate "
        "are 4-bit gs64 like the rest); switch_mlp stacked experts; top-4 of 8",
    },
    {
        "name": "glm4_moe_hf_bf16",
        "family": "glm4_moe",
        "layout": "hf",
        "config": _glm4_moe_cfg(h=64, nh=4, nkv=2, hd=32, inter=96, moe_i=48, e=16, k=4, groups=4, topk_groups=2,
                                scale=2.5, v=256, layers=3, qk_norm=True, nextn=1),
        "config_writer": "save_pretrained",
        "f32_tensors": ("e_score_correction_bias",),
        "mtp": True,
        "notes": "GLM-4.5 style: q/k norms, q/k/v biases (N(0, 0.5)), half-rotary RoPE (16 of head_dim 32), "
        "sigmoid router with e_score_correction_bias (F32, N(0, 0.2)) choosing top-4 of 16 experts in the 2 "
        "best of 4 groups, routed_scaling_factor 2.5, one ungated shared expert (mlp.shared_experts), "
        "layer 0 dense (intermediate 96); per-expert tensors; model.layers.3.* the MTP layer as GLM stores it "
        "(eh_proj, enorm, hnorm, shared_head.norm, a full layer; num_nextn_predict_layers 1), mtp_logits from "
        "make_mtp_head's nextn form (vLLM glm4_moe_mtp.py)",
    },
    {
        "name": "glm4_moe_mlx_q4",
        "family": "glm4_moe",
        "layout": "mlx",
        "bits": 4,
        "group_size": 64,
        "config": _glm4_moe_cfg(h=128, nh=4, nkv=2, hd=32, inter=128, moe_i=64, e=8, k=2, groups=1, topk_groups=1,
                                scale=1.0, v=256, layers=3, qk_norm=False, nextn=0),
        "config_writer": "save_pretrained",
        "f32_tensors": ("e_score_correction_bias",),
        "notes": "GLM-4.5-Air style as mlx-lm writes it: no q/k norms, one group, routed_scaling_factor 1; "
        "switch_mlp stacked experts, 4-bit gs64; the router (mlx-lm's MoEGate is not a Linear) kept bf16 "
        "and its e_score_correction_bias F32 (cast_predicate)",
    },
    {
        "name": "deepseek_v3_hf_bf16",
        "family": "deepseek_v3",
        "layout": "hf",
        "config": _deepseek_v3_cfg(h=64, nh=4, q_lora=48, kv_lora=48, nope=32, rope=16, vdim=24, inter=96, moe_i=32,
                                   e=16, k=4, groups=4, topk_groups=2, scale=2.5, shared=1, norm_topk=True,
                                   first_dense=1, interleave=True, v=256, layers=3, nextn=1,
                                   yarn={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                         "original_max_position_embeddings": 64, "beta_fast": 32.0,
                                         "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 0.707}),
        "config_writer": "save_pretrained",
        "f32_tensors": ("e_score_correction_bias",),
        "mtp": True,
        "notes": "DeepSeek-V3 in miniature: q_lora_rank 48 (q_a_proj / q_a_layernorm / q_b_proj), kv_lora_rank 48 "
        "+ a 16-dim rope key (the latent cache row: 64 values), qk_nope 32, v_head_dim 24 != nope, interleaved "
        "RoPE, YaRN factor 4 over 64 positions with mscale 1 / mscale_all_dim 0.707 (cos/sin scaled by their "
        "ratio, the softmax by mscale_all_dim's squared), sigmoid router + e_score_correction_bias (F32) "
        "choosing top-4 of 16 in the 2 best of 4 groups, routed_scaling_factor 2.5, one shared expert, layer 0 "
        "dense (intermediate 96); per-expert tensors; model.layers.3.* the MTP layer as DeepSeek-V3 stores it (eh_proj, "
        "enorm, hnorm, shared_head.norm, a full MLA + MoE layer; no copies of the embedding or lm_head), mtp_logits "
        "from make_mtp_head's nextn form (vLLM deepseek_mtp.py: position 0's embedding zeroed, chained on the "
        "layer's output before shared_head.norm)",
    },
    {
        "name": "deepseek_v3_nolora_hf_bf16",
        "family": "deepseek_v3",
        "layout": "hf",
        "config": _deepseek_v3_cfg(h=64, nh=4, q_lora=None, kv_lora=48, nope=32, rope=16, vdim=32, inter=96,
                                   moe_i=32, e=8, k=2, groups=1, topk_groups=1, scale=1.0, shared=2,
                                   norm_topk=False, first_dense=0, interleave=False, v=256, layers=2, nextn=0,
                                   yarn=None),
        "config_writer": "save_pretrained",
        "f32_tensors": ("e_score_correction_bias",),
        "notes": "DeepSeek-V2-Lite style attention: q_lora_rank null (a plain q_proj), NeoX (non-interleaved) RoPE "
        "without scaling, v_head_dim 32 = nope; every layer MoE (first_k_dense_replace 0), top-2 of 8 in one "
        "group NOT renormalised, scale 1, two shared experts (one MLP of 2 x 32)",
    },
    {
        "name": "deepseek_v3_mlx_q4",
        "family": "deepseek_v3",
        "layout": "mlx",
        "bits": 4,
        "group_size": 64,
        "config": _deepseek_v3_cfg(h=128, nh=4, q_lora=64, kv_lora=64, nope=64, rope=32, vdim=32, inter=128,
                                   moe_i=64, e=8, k=2, groups=2, topk_groups=1, scale=1.5, shared=1, norm_topk=True,
                                   first_dense=1, interleave=True, v=256, layers=3, nextn=0, yarn=None),
        "config_writer": "save_pretrained",
        "f32_tensors": ("e_score_correction_bias",),
        "notes": "DeepSeek-V3 as current mlx-lm writes it: kv_b_proj split into self_attn.embed_q [heads, latent, "
        "nope] and self_attn.unembed_out [heads, v, latent] (MultiLinear, 4-bit gs64 along their last axes), "
        "switch_mlp stacked experts, the router (MoEGate) bf16 and its bias F32; 2 groups keep 1",
    },
    {
        "name": "qwen3_moe_hf_bf16",
        "family": "qwen3_moe",
        "layout": "hf",
        "config": _qwen3_moe_cfg(h=64, nh=4, nkv=2, hd=32, moe_i=48, e=8, k=2, v=256, layers=3, norm_topk=False),
        "notes": "per-expert tensors; norm_topk_prob false (top-k softmax weights NOT renormalised); "
        "head_dim 32 != hidden/heads 16; moe_intermediate 48",
    },
    {
        "name": "qwen3_moe_mlx_q4",
        "family": "qwen3_moe",
        "layout": "mlx",
        "bits": 4,
        "group_size": 64,
        "config": _qwen3_moe_cfg(h=64, nh=4, nkv=2, hd=32, moe_i=64, e=8, k=2, v=256, layers=3, norm_topk=True),
        "notes": "mlx-lm layout: switch_mlp stacked experts, 4-bit gs64, router mlp.gate 8-bit gs64 via a "
        "per-module override; embed_tokens and lm_head quantised; norm_topk_prob true",
    },
    {
        "name": "qwen3_moe_yarn_hf_bf16",
        "family": "qwen3_moe",
        "layout": "hf",
        "config": {
            k: v
            for k, v in (
                _qwen3_moe_cfg(h=64, nh=4, nkv=2, hd=32, moe_i=48, e=8, k=2, v=256, layers=2, norm_topk=True)
                | {
                    "max_position_embeddings": 256,
                    "rope_parameters": {
                        "rope_type": "yarn",
                        "rope_theta": 10000.0,
                        "factor": 4.0,
                        "original_max_position_embeddings": 64,
                    },
                }
            ).items()
            if k not in ("rope_theta", "rope_scaling")
        },
        "config_writer": "save_pretrained",
        "notes": "YaRN rope scaling (Qwen3's 128K recipe in miniature): factor 4 over 64 original positions, "
        "rope_theta 1e4 so the ramp spans dims 0..5 of 16; the 137-token prompt runs past the original "
        "context; cos/sin scaled by the default attention factor 0.1 ln 4 + 1",
    },
    {
        "name": "qwen3_next_hf_bf16",
        "family": "qwen3_next",
        "layout": "hf",
        "config": _qwen3_next_cfg(
            h=64, nh=4, nkv=2, hd=32, nk=2, nv=4, dk=16, dv=24, moe_i=48, sh_i=40, e=8, k=3, v=300, layers=4, interval=4
        ),
        "notes": "interleaved in_proj_qkvz/in_proj_ba, per-expert tensors, conv1d [C,1,K], raw zero-centred "
        "norm weights (random, non-zero), nv=4 != nk=2, dv=24 != dk=16, head_dim 32 != hidden/heads 16, "
        "moe_intermediate 48, shared 40, vocab 300, top-3 of 8; config.json has no layer_types "
        "(derive from full_attention_interval)",
    },
    {
        "name": "qwen3_next_mlx_q4",
        "family": "qwen3_next",
        "layout": "mlx",
        "bits": 4,
        "group_size": 32,
        "config": _qwen3_next_cfg(
            h=64, nh=4, nkv=2, hd=32, nk=2, nv=4, dk=16, dv=24, moe_i=64, sh_i=32, e=8, k=3, v=300, layers=4, interval=4
        ),
        "notes": "mlx-lm sanitize layout: +1 folded into input/post_attention/final/q/k norms (NOT "
        "linear_attn.norm), conv1d [C,K,1], switch_mlp stacked experts; 4-bit gs32, bf16 scales/biases; "
        "mlp.gate and mlp.shared_expert_gate 8-bit gs64 via overrides; embed_tokens and lm_head quantised",
    },
    {
        "name": "qwen3_next_mlx_q8",
        "family": "qwen3_next",
        "layout": "mlx",
        "bits": 8,
        "group_size": 128,
        "config": _qwen3_next_cfg(
            h=128, nh=4, nkv=2, hd=64, nk=2, nv=4, dk=16, dv=32, moe_i=128, sh_i=128, e=4, k=2, v=256, layers=2, interval=2
        ),
        "notes": "8-bit gs128 (router and shared_expert_gate override 8-bit gs64); full_attention_interval 2 "
        "with 2 layers: [linear_attention, full_attention]",
    },
    {
        "name": "qwen3_5_moe_hf_bf16",
        "family": "qwen3_5_moe",
        "layout": "hf",
        "config": _qwen3_5_moe_cfg(h=64, nh=4, nkv=2, hd=32, nk=2, nv=4, dk=16, dv=24, moe_i=48, sh_i=40, e=6, k=2, v=320, layers=4),
        "f32_tensors": ("A_log",),
        "notes": "nested config (text_config qwen3_5_moe_text + tiny vision_config), model.language_model. "
        "prefix, fused experts gate_up_proj [E,2I,H] / down_proj [E,H,I], split GDN projections, top-level "
        "lm_head.weight, model.visual.* present (must be ignored); A_log stored F32, everything else BF16",
    },
    {
        "name": "qwen3_5_moe_mlx_q4",
        "family": "qwen3_5_moe",
        "layout": "mlx",
        "bits": 4,
        "group_size": 64,
        "config": _qwen3_5_moe_cfg(h=64, nh=4, nkv=2, hd=32, nk=2, nv=4, dk=32, dv=16, moe_i=64, sh_i=64, e=8, k=2, v=256, layers=4),
        "f32_tensors": ("A_log",),
        "notes": "mlx-lm layout: language_model.model.* / language_model.lm_head, switch_mlp split from the "
        "fused gate_up_proj, +1 folded norms, conv1d [C,K,1], vision tower dropped; 4-bit gs64, "
        "mlp.gate / mlp.shared_expert_gate 8-bit gs64 overrides keyed by language_model.model.layers.N...; "
        "A_log kept F32 (mlx-lm cast_predicate)",
    },
    {
        "name": "qwen3_next_mtp_hf_bf16",
        "family": "qwen3_next",
        "layout": "hf",
        "mtp": True,
        "config": _qwen3_next_cfg(
            h=64, nh=4, nkv=2, hd=32, nk=2, nv=4, dk=16, dv=24, moe_i=48, sh_i=40, e=8, k=3, v=300, layers=4, interval=4
        ),
        "notes": "qwen3_next_hf_bf16's shapes plus the MTP head as the real checkpoint stores it (mtp.fc, "
        "mtp.pre_fc_norm_embedding / _hidden, mtp.norm, mtp.layers.0.* with per-expert tensors; raw "
        "zero-centred norms); config.json without num_nextn_predict_layers (as Qwen3-Next's); mtp_logits "
        "from make_mtp_head (vLLM qwen3_next_mtp.py's computation on transformers' own layer)",
    },
    {
        "name": "qwen3_next_mtp_mlx_q4",
        "family": "qwen3_next",
        "layout": "mlx",
        "bits": 4,
        "group_size": 32,
        "mtp": True,
        "config": _qwen3_next_cfg(
            h=64, nh=4, nkv=2, hd=32, nk=2, nv=4, dk=16, dv=24, moe_i=64, sh_i=64, e=8, k=3, v=300, layers=4, interval=4
        ),
        "notes": "the MLX layout of the default model with an MTP head kept (mlx-lm drops it; sluice's "
        "tiny-next ships one): mtp.* quantised as the rest (4-bit gs32, router and shared-expert gate "
        "8-bit), mtp.layers.0.mlp.switch_mlp stacked experts, +1 folded into every MTP norm",
    },
    {
        "name": "qwen3_5_moe_mtp_hf_bf16",
        "family": "qwen3_5_moe",
        "layout": "hf",
        "mtp": True,
        "config": _qwen3_5_moe_cfg(h=64, nh=4, nkv=2, hd=32, nk=2, nv=4, dk=16, dv=24, moe_i=48, sh_i=40, e=6, k=2, v=320, layers=4),
        "f32_tensors": ("A_log",),
        "notes": "qwen3_5_moe_hf_bf16's shapes plus the MTP head at top level (mtp.*, the MTP layer's "
        "experts per expert while the main layers' are fused)",
    },
    {
        "name": "gpt_oss_hf_bf16",
        "family": "gpt_oss",
        "layout": "hf",
        "config": _gpt_oss_cfg(h=64, nh=4, nkv=2, hd=16, inter=64, e=8, k=4, v=256, layers=4, window=6),
        "config_writer": "save_pretrained",
        "notes": "gpt-oss as transformers stores a bf16 GptOss model (mlp.experts.gate_up_proj [E, H, 2I], "
        "gate_up_proj_bias, down_proj [E, I, H], down_proj_bias, mlp.router.weight/bias, self_attn.sinks): "
        + GPT_OSS_NOTES,
    },
    {
        "name": "gpt_oss_hf_mxfp4",
        "family": "gpt_oss",
        "layout": "mxfp4",
        "bits": 4,
        "group_size": 32,
        "config": _gpt_oss_cfg(h=64, nh=4, nkv=2, hd=16, inter=64, e=8, k=4, v=256, layers=4, window=6),
        "config_writer": "save_pretrained",
        "quantization_config": GPT_OSS_MXFP4_QUANT,
        "notes": "gpt-oss as the Hub ships it: experts as mlp.experts.gate_up_proj_blocks U8 [E, 2I, H/32, 16] + "
        "gate_up_proj_scales U8 [E, 2I, H/32], down_proj_blocks U8 [E, H, I/32, 16] + down_proj_scales U8 "
        "[E, H, I/32] (rows = output features, MXFP4 along the input; the model's [E, H, 2I] / [E, I, H] are "
        "their dequantised transposes), expert biases and every other tensor bf16; the expert weights are FP4 "
        "codes + E8M0 scales (the nearest MXFP4 of a normal draw), so their dequantised values are exact in "
        "bf16 and are what the reference runs; config.json with the Hub's quantization_config. "
        + GPT_OSS_NOTES,
    },
]

# ----------------------------------------------------------------------------------------------
# Random weights (keyed by in-memory parameter name, independent of transformers' init order)
# ----------------------------------------------------------------------------------------------


GPT_OSS_GATE_UP_STD = 3.0
GPT_OSS_DOWN_STD = 0.25


def _rng_for(golden: str, name: str) -> np.random.Generator:
    h = hashlib.sha256(f"{MASTER_SEED}/{golden}/{name}".encode()).digest()
    return np.random.default_rng(int.from_bytes(h[:8], "little"))


def draw_param(golden: str, family: str, name: str, shape: tuple, current: np.ndarray) -> np.ndarray:
    """Initialisation chosen so activations stay O(1) and logits have std ~1."""
    r = _rng_for(golden, name)
    if ".visual." in name or name.startswith("model.visual") or name.startswith("visual"):
        return current.astype(np.float32)  # vision tower: transformers' seeded init, never used for text
    if name.endswith("A_log"):
        return np.log(r.uniform(0.05, 2.0, size=shape)).astype(np.float32)
    if name.endswith("dt_bias"):
        return r.uniform(-3.0, 0.5, size=shape).astype(np.float32)
    if "conv1d.weight" in name:
        return r.normal(0.0, 0.5, size=shape).astype(np.float32)
    if family == "gpt_oss":
        if name.endswith("self_attn.sinks"):  # raw logits beside the scores: N(0, 1) gives some heads a visible share
            return r.normal(0.0, 1.0, size=shape).astype(np.float32)
        if name.endswith(("experts.gate_up_proj_bias", "experts.down_proj_bias")):
            return r.normal(0.0, 0.5, size=shape).astype(np.float32)
        # Experts are input-major ([E, in, out]: y = x @ W). gate/up pre-activations of std ~3 so the clamp
        # at swiglu_limit 7 clips a few per cent; down_proj small enough that the output stays O(1).
        if name.endswith("experts.gate_up_proj"):
            return r.normal(0.0, GPT_OSS_GATE_UP_STD / np.sqrt(shape[-2]), size=shape).astype(np.float32)
        if name.endswith("experts.down_proj"):
            return r.normal(0.0, GPT_OSS_DOWN_STD / np.sqrt(shape[-2]), size=shape).astype(np.float32)
    if name.endswith("e_score_correction_bias"):  # a sigmoid router's selection bias (GLM)
        return r.normal(0.0, 0.2, size=shape).astype(np.float32)
    if name.endswith(".bias"):  # Qwen2's / GLM's q/k/v biases
        return r.normal(0.0, 0.5, size=shape).astype(np.float32)
    if len(shape) == 1:  # norm weights
        zero_centred = family in ("qwen3_next", "qwen3_5_moe") and "linear_attn.norm" not in name
        off = r.uniform(-0.4, 0.4, size=shape)
        return (off if zero_centred else 1.0 + off).astype(np.float32)
    if name.endswith("embed_tokens.weight"):
        return r.normal(0.0, 1.0, size=shape).astype(np.float32)
    # Linear / expert weights: last axis is the input axis.
    return r.normal(0.0, 1.0 / np.sqrt(shape[-1]), size=shape).astype(np.float32)


# ----------------------------------------------------------------------------------------------
# Layout conversions. "mem" = transformers' in-memory parameter names; "hf" = the real HF
# checkpoint layout; "mlx" = what mlx-lm's sanitize + quantize writes.
# ----------------------------------------------------------------------------------------------

_FUSED_RE = re.compile(r"^(.*\.mlp\.experts)\.(gate_up_proj|down_proj)$")
_PER_EXPERT_RE = re.compile(r"^(.*\.mlp\.experts)\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$")


def _mem_to_hf_generic(family: str, mem: dict) -> dict:
    """In-memory f32 params -> HF checkpoint names (f32, not yet rounded)."""
    out = {}
    for n, a in mem.items():
        m = _FUSED_RE.match(n)
        # The MTP layer's experts are stored per expert in Qwen3.5 checkpoints too (models.md §4, 8).
        if m and (family in ("qwen3_moe", "qwen3_next", "glm4_moe", "qwen2_moe", "deepseek_v3") or n.startswith("mtp.")):
            base, kind = m.groups()
            if kind == "gate_up_proj":
                i = a.shape[1] // 2
                for e in range(a.shape[0]):
                    out[f"{base}.{e}.gate_proj.weight"] = a[e, :i]
                    out[f"{base}.{e}.up_proj.weight"] = a[e, i:]
            else:
                for e in range(a.shape[0]):
                    out[f"{base}.{e}.down_proj.weight"] = a[e]
        else:
            out[n] = a
    return out


def _hf_to_mem_generic(family: str, hf: dict, mem_names: set) -> dict:
    """Inverse of mem_to_hf (what a loader of the real HF layout does)."""
    out, groups = {}, {}
    for n, a in hf.items():
        m = _PER_EXPERT_RE.match(n)
        if m and f"{m.group(1)}.gate_up_proj" in mem_names:
            base, e, kind = m.groups()
            groups.setdefault(base, {}).setdefault(kind, {})[int(e)] = a
        else:
            out[n] = a
    for base, kinds in groups.items():
        ne = len(kinds["gate_proj"])
        out[f"{base}.gate_up_proj"] = np.stack(
            [np.concatenate([kinds["gate_proj"][e], kinds["up_proj"][e]], axis=0) for e in range(ne)]
        )
        out[f"{base}.down_proj"] = np.stack([kinds["down_proj"][e] for e in range(ne)])
    return out


def _hf_to_mlx_names_generic(family: str, hf: dict) -> dict:
    """HF checkpoint (bf16-representable f32 values) -> unquantised mlx-lm tensors (f32 values that
    are then rounded to bf16 exactly as mlx-lm's sanitize does in bf16)."""
    out, stacks = {}, {}
    for n, a in hf.items():
        if family == "qwen3_5_moe":
            if n.startswith("model.visual.") or n.startswith("mtp."):
                continue
            if n.startswith("model.language_model."):
                n = "language_model.model." + n[len("model.language_model.") :]
            elif n.startswith("lm_head."):
                n = "language_model." + n
        m = _PER_EXPERT_RE.match(n)
        if m:
            base, e, kind = m.groups()
            stacks.setdefault((base, kind), {})[int(e)] = a
            continue
        m = _FUSED_RE.match(n)
        if m:
            base, kind = m.groups()
            sw = base[: -len(".experts")] + ".switch_mlp"
            if kind == "gate_up_proj":
                i = a.shape[-2] // 2
                out[f"{sw}.gate_proj.weight"] = a[:, :i, :]
                out[f"{sw}.up_proj.weight"] = a[:, i:, :]
            else:
                out[f"{sw}.down_proj.weight"] = a
            continue
        if n.endswith("conv1d.weight"):
            a = np.ascontiguousarray(np.moveaxis(a, 2, 1))  # [C,1,K] -> [C,K,1]
        if family in ("qwen3_next", "qwen3_5_moe") and n.endswith(_ZC_NORM_SUFFIXES):
            a = round_bf16(a + np.float32(1.0))  # sanitize adds 1.0 to the bf16 tensor
        out[n] = a
    for (base, kind), d in stacks.items():
        sw = base[: -len(".experts")] + ".switch_mlp"
        out[f"{sw}.{kind}.weight"] = np.stack([d[e] for e in range(len(d))])
    return out


def _mlx_to_hf_names_generic(family: str, mlx: dict) -> dict:
    """Inverse of hf_to_mlx_names (f32 values; quantised tensors already dequantised)."""
    out = {}
    for n, a in mlx.items():
        if family in ("qwen3_next", "qwen3_5_moe") and n.endswith(_ZC_NORM_SUFFIXES):
            a = (a - np.float32(1.0)).astype(np.float32)
        if n.endswith("conv1d.weight"):
            a = np.ascontiguousarray(np.moveaxis(a, 1, 2))
        m = re.match(r"^(.*\.mlp)\.switch_mlp\.(gate_proj|up_proj|down_proj)\.weight$", n)
        if m:
            base, kind = m.groups()
            if family == "qwen3_5_moe":
                out.setdefault(("fused", base), {})[kind] = a
            else:
                for e in range(a.shape[0]):
                    out[f"{base}.experts.{e}.{kind}.weight"] = a[e]
            continue
        out[n] = a
    res = {}
    for k, v in out.items():
        if isinstance(k, tuple):
            base = k[1]
            res[f"{base}.experts.gate_up_proj"] = np.concatenate([v["gate_proj"], v["up_proj"]], axis=1)
            res[f"{base}.experts.down_proj"] = v["down_proj"]
        else:
            res[k] = v
    if family == "qwen3_5_moe":
        res2 = {}
        for n, a in res.items():
            if n.startswith("language_model.model."):
                n = "model.language_model." + n[len("language_model.model.") :]
            elif n.startswith("language_model.lm_head."):
                n = n[len("language_model.") :]
            res2[n] = a
        res = res2
    return res


# Mixtral names its MoE block block_sparse_moe and its experts w1 (gate), w3 (up), w2 (down); the
# generic converters above take Qwen-style names, so Mixtral's are mapped onto them and back.
_MIXTRAL_PROJ = (("w1", "gate_proj"), ("w3", "up_proj"), ("w2", "down_proj"))


def _mixtral_to_q(n: str) -> str:
    for w, proj in _MIXTRAL_PROJ:
        n = re.sub(rf"\.block_sparse_moe\.experts\.(\d+)\.{w}\.", rf".mlp.experts.\1.{proj}.", n)
    return n.replace(".block_sparse_moe.", ".mlp.")


def _q_to_mixtral(n: str) -> str:
    for w, proj in _MIXTRAL_PROJ:
        n = re.sub(rf"\.mlp\.experts\.(\d+)\.{proj}\.", rf".block_sparse_moe.experts.\1.{w}.", n)
    return n.replace(".mlp.", ".block_sparse_moe.")


def mem_to_hf(family: str, mem: dict) -> dict:
    if family != "mixtral":
        return _mem_to_hf_generic(family, mem)
    out = _mem_to_hf_generic("qwen3_moe", {_mixtral_to_q(n): a for n, a in mem.items()})
    return {_q_to_mixtral(n): a for n, a in out.items()}


def hf_to_mem(family: str, hf: dict, mem_names: set) -> dict:
    if family != "mixtral":
        return _hf_to_mem_generic(family, hf, mem_names)
    out = _hf_to_mem_generic("qwen3_moe", {_mixtral_to_q(n): a for n, a in hf.items()},
                             {_mixtral_to_q(n) for n in mem_names})
    # back to the in-memory spelling (transformers 5 may keep block_sparse_moe or call it mlp)
    back = {_mixtral_to_q(n): n for n in mem_names}
    return {back.get(n, n): a for n, a in out.items()}


# DeepSeek-V3 in mlx-lm (deepseek_v3.py sanitize): kv_b_proj [heads·(nope + v), latent] becomes two
# MultiLinear weights, embed_q [heads, latent, nope] (W_UKᵀ per head: the absorbed query's) and
# unembed_out [heads, v, latent] (W_UV), each quantized along its last axis like any Linear.
_KV_B_RE = re.compile(r"^(.*\.self_attn)\.kv_b_proj\.weight$")


def _split_kv_b(hf: dict, dims: dict) -> dict:
    out = {}
    nh, nope, v = dims["heads"], dims["nope"], dims["v"]
    for n, a in hf.items():
        m = _KV_B_RE.match(n)
        if not m:
            out[n] = a
            continue
        w = a.reshape(nh, nope + v, a.shape[-1])
        out[m.group(1) + ".embed_q.weight"] = np.ascontiguousarray(w[:, :nope, :].transpose(0, 2, 1))
        out[m.group(1) + ".unembed_out.weight"] = np.ascontiguousarray(w[:, nope:, :])
    return out


def _join_kv_b(mlx: dict) -> dict:
    out = dict(mlx)
    for n in list(mlx):
        if n.endswith(".self_attn.embed_q.weight"):
            base = n[: -len(".embed_q.weight")]
            wk = out.pop(n).transpose(0, 2, 1)  # [heads, nope, latent]
            wv = out.pop(base + ".unembed_out.weight")  # [heads, v, latent]
            out[base + ".kv_b_proj.weight"] = np.concatenate([wk, wv], axis=1).reshape(-1, wk.shape[-1])
    return out


def mla_dims(config: dict) -> dict | None:
    c = config.get("text_config", config)
    if "kv_lora_rank" not in c:
        return None
    return {"heads": c["num_attention_heads"], "nope": c["qk_nope_head_dim"], "v": c["v_head_dim"]}


def hf_to_mlx_names(family: str, hf: dict, dims: dict | None = None) -> dict:
    if family == "deepseek_v3":
        return _hf_to_mlx_names_generic(family, _split_kv_b(hf, dims))
    if family != "mixtral":
        return _hf_to_mlx_names_generic(family, hf)
    out = _hf_to_mlx_names_generic("qwen3_moe", {_mixtral_to_q(n): a for n, a in hf.items()})
    return {_q_to_mixtral(n): a for n, a in out.items()}


def mlx_to_hf_names(family: str, mlx: dict) -> dict:
    if family == "deepseek_v3":
        return _mlx_to_hf_names_generic(family, _join_kv_b(mlx))
    if family != "mixtral":
        return _mlx_to_hf_names_generic(family, mlx)
    out = _mlx_to_hf_names_generic("qwen3_moe", {_mixtral_to_q(n): a for n, a in mlx.items()})
    return {_q_to_mixtral(n): a for n, a in out.items()}


def mlx_quant_override(family: str, name: str):
    """mlx-lm quant_predicate: the router (and the shared-expert gate) stay at 8-bit gs64; GLM's router
    (MoEGate, not a Linear) is not quantised at all: False."""
    if family in ("qwen2_moe", "mixtral"):  # mlx-lm's qwen2_moe.py / mixtral.py have no quant_predicate
        return None
    if name.endswith("mlp.gate.weight"):  # GLM's and DeepSeek's MoEGate is no Linear: kept float
        return False if family in ("glm4_moe", "deepseek_v3") else {"group_size": 64, "bits": 8}
    if family in ("qwen3_next", "qwen3_5_moe") and name.endswith("mlp.shared_expert_gate.weight"):
        return {"group_size": 64, "bits": 8}
    return None


def build_mlx_checkpoint(family: str, mlx: dict, bits: int, gs: int, f32_tensors) -> tuple[dict, dict]:
    """Quantise every Linear/Embedding/SwitchLinear weight (2-D or 3-D '.weight', not conv1d) whose
    input dim divides the group size. Returns (stored tensors, quantization block)."""
    stored, qblock = {}, {"group_size": gs, "bits": bits, "mode": "affine"}
    for n in sorted(mlx):
        a = mlx[n]
        quantisable = n.endswith(".weight") and a.ndim in (2, 3) and "conv1d" not in n
        if quantisable and mlx_quant_override(family, n) is False:
            quantisable = False
        if quantisable:
            ov = mlx_quant_override(family, n)
            b, g = (ov["bits"], ov["group_size"]) if ov else (bits, gs)
            if a.shape[-1] % g == 0:
                path = n[: -len(".weight")]
                w, s, bi = mlx_affine_quantize(round_bf16(a), b, g)
                stored[path + ".weight"] = ("U32", w)
                stored[path + ".scales"] = ("BF16", s)
                stored[path + ".biases"] = ("BF16", bi)
                if ov:
                    qblock[path] = dict(ov)
                continue
            raise ValueError(f"[make_goldens] {n}: last dim {a.shape[-1]} not divisible by group size {g}")
        if any(n.endswith(t) for t in f32_tensors):
            stored[n] = ("F32", a.astype(np.float32))
        else:
            stored[n] = ("BF16", f32_to_bf16_bits(a))
    return stored, qblock


def read_mlx_checkpoint(stored: dict, qblock: dict) -> dict:
    """Independent reader: dequantise (w = s*q + b in f32), bf16 -> f32."""
    out = {}
    for n, (dt, a) in stored.items():
        if n.endswith(".scales") or n.endswith(".biases"):
            continue
        if n.endswith(".weight") and (n[: -len(".weight")] + ".scales") in stored:
            path = n[: -len(".weight")]
            ov = qblock.get(path, {})
            bits, gs = ov.get("bits", qblock["bits"]), ov.get("group_size", qblock["group_size"])
            out[n] = mlx_dequantize(a, stored[path + ".scales"][1], stored[path + ".biases"][1], bits, gs)
        elif dt == "BF16":
            out[n] = bf16_bits_to_f32(a)
        else:
            out[n] = a.astype(np.float32)
    return out


def build_hf_checkpoint(hf: dict, f32_tensors) -> dict:
    stored = {}
    for n, a in hf.items():
        if any(n.endswith(t) for t in f32_tensors):
            stored[n] = ("F32", np.ascontiguousarray(a, dtype=np.float32))
        else:
            stored[n] = ("BF16", f32_to_bf16_bits(a))
    return stored


def read_hf_checkpoint(stored: dict) -> dict:
    return {n: (bf16_bits_to_f32(a) if dt == "BF16" else a.astype(np.float32)) for n, (dt, a) in stored.items()}


# gpt-oss's Hub layout: the model's input-major experts ([E, in, out]) are stored transposed, one MXFP4
# row per output feature: NAME_blocks [E, out, in/32, 16], NAME_scales [E, out, in/32].
_MXFP4_EXPERTS_RE = re.compile(r"^(.*\.mlp\.experts)\.(gate_up_proj|down_proj)$")


def build_mxfp4_checkpoint(hf: dict, f32_tensors) -> dict:
    stored = {}
    for n, a in hf.items():
        if _MXFP4_EXPERTS_RE.match(n):
            blocks, scales = mxfp4_quantize(np.ascontiguousarray(np.swapaxes(a, 1, 2)))
            stored[n + "_blocks"] = ("U8", blocks)
            stored[n + "_scales"] = ("U8", scales)
        elif any(n.endswith(t) for t in f32_tensors):
            stored[n] = ("F32", np.ascontiguousarray(a, dtype=np.float32))
        else:
            stored[n] = ("BF16", f32_to_bf16_bits(a))
    return stored


def read_mxfp4_checkpoint(stored: dict) -> dict:
    """Independent reader: dequantise NAME_blocks/NAME_scales and transpose back to [E, in, out]."""
    out = {}
    for n, (dt, a) in stored.items():
        if n.endswith("_scales"):
            continue
        if n.endswith("_blocks"):
            base = n[: -len("_blocks")]
            out[base] = np.ascontiguousarray(np.swapaxes(mxfp4_dequantize(a, stored[base + "_scales"][1]), 1, 2))
        else:
            out[n] = bf16_bits_to_f32(a) if dt == "BF16" else a.astype(np.float32)
    return out


def layout_checkpoint(golden: dict, mem: dict, mem_names: set) -> tuple[dict, dict, dict | None, dict]:
    """In-memory f32 params -> (stored tensors in the golden's layout, safetensors metadata, MLX quantization
    block or None, the in-memory params read back from the stored tensors by the independent readers)."""
    name, fam, layout = golden["name"], golden["family"], golden["layout"]
    hf = mem_to_hf(fam, mem)
    f32_tensors = golden.get("f32_tensors", ())
    # A nextn head's layer (model.layers.N after the decoder's): transformers' model does not hold it.
    n_layers = golden["config"].get("text_config", golden["config"])["num_hidden_layers"]
    nextn_prefix = f"model.layers.{n_layers}."
    qblock = None
    if layout == "hf":  # qwen3_5_moe: the in-memory names are the checkpoint names
        stored = build_hf_checkpoint(hf, f32_tensors)
        back_hf = read_hf_checkpoint(stored)
        meta = {"format": "pt"}
    elif layout == "mxfp4":
        stored = build_mxfp4_checkpoint(hf, f32_tensors)
        back_hf = read_mxfp4_checkpoint(stored)
        meta = {"format": "pt"}
    else:
        hf_rounded = {n: (a if any(n.endswith(t) for t in f32_tensors) else round_bf16(a)) for n, a in hf.items()}
        mlx = hf_to_mlx_names(fam, hf_rounded, mla_dims(golden["config"]))
        stored, qblock = build_mlx_checkpoint(fam, mlx, golden["bits"], golden["group_size"], f32_tensors)
        back_hf = mlx_to_hf_names(fam, read_mlx_checkpoint(stored, qblock))
        meta = {"format": "mlx"}
    back_mem = hf_to_mem(fam, back_hf, mem_names)
    missing = sorted(n for n in mem_names if n not in back_mem and ".visual." not in n and not n.startswith("model.visual"))
    extra = sorted(n for n in back_mem if n not in mem_names and not n.startswith(nextn_prefix))
    if missing or extra:
        raise RuntimeError(f"[make_goldens] {name}: layout round trip: missing {missing[:8]} extra {extra[:8]}")
    return stored, meta, qblock, back_mem


def write_config_json(golden: dict, gdir: str, cfg_json: dict, qblock: dict | None) -> dict:
    """config.json in the golden's layout: MLX adds mlx-lm's quantization block (and its copy), MXFP4
    the Hub's quantization_config."""
    layout = golden["layout"]
    if layout == "mlx":
        cfg_json["quantization"] = qblock
        cfg_json["quantization_config"] = dict(qblock)
        cfg_json = dict(sorted(cfg_json.items()))
    elif layout == "mxfp4":
        cfg_json["quantization_config"] = json.loads(json.dumps(golden["quantization_config"]))
        cfg_json = dict(sorted(cfg_json.items()))
    with open(os.path.join(gdir, "config.json"), "w") as f:
        json.dump(cfg_json, f, indent=4 if layout == "mlx" else 2)
        f.write("\n")
    return cfg_json


def prompt_ids(name: str, vocab: int) -> np.ndarray:
    rng = np.random.default_rng(int.from_bytes(hashlib.sha256(f"{MASTER_SEED}/{name}/prompt".encode()).digest()[:8], "little"))
    return rng.integers(0, vocab - 8, size=PROMPT_LEN).astype(np.int64)  # keep clear of the vision ids


def weight_dtype_of(golden: dict) -> str:
    if golden["layout"] == "hf":
        return "bf16"
    if golden["layout"] == "mxfp4":
        return "mxfp4 experts (U8 FP4 E2M1 codes, 32 per U8 E8M0 scale), bf16 elsewhere"
    return f"mlx affine {golden['bits']}-bit gs{golden['group_size']}, bf16 scales/biases"


# The in-memory parameters (name -> shape) of a family's transformers model, for the numpy reference
# (--numpy-reference), which has no model to list them; the transformers run checks the table against
# named_parameters(), so a provisional checkpoint is the one the transformers run writes.
def gpt_oss_param_shapes(c: dict) -> dict:
    h, nh, nkv, hd = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    e, i, v = c["num_local_experts"], c["intermediate_size"], c["vocab_size"]
    shapes = {"model.embed_tokens.weight": (v, h), "model.norm.weight": (h,), "lm_head.weight": (v, h)}
    for li in range(c["num_hidden_layers"]):
        p = f"model.layers.{li}."
        for proj, rows, cols in (("q_proj", nh * hd, h), ("k_proj", nkv * hd, h), ("v_proj", nkv * hd, h), ("o_proj", h, nh * hd)):
            shapes[f"{p}self_attn.{proj}.weight"] = (rows, cols)
            shapes[f"{p}self_attn.{proj}.bias"] = (rows,)
        shapes[f"{p}self_attn.sinks"] = (nh,)
        shapes[f"{p}mlp.router.weight"] = (e, h)
        shapes[f"{p}mlp.router.bias"] = (e,)
        shapes[f"{p}mlp.experts.gate_up_proj"] = (e, h, 2 * i)
        shapes[f"{p}mlp.experts.gate_up_proj_bias"] = (e, 2 * i)
        shapes[f"{p}mlp.experts.down_proj"] = (e, i, h)
        shapes[f"{p}mlp.experts.down_proj_bias"] = (e, h)
        shapes[f"{p}input_layernorm.weight"] = (h,)
        shapes[f"{p}post_attention_layernorm.weight"] = (h,)
    return shapes


NUMPY_PARAM_SHAPES = {"gpt_oss": gpt_oss_param_shapes}


# ----------------------------------------------------------------------------------------------
# transformers side
# ----------------------------------------------------------------------------------------------

_GDN_FUNCS = (
    "torch_chunk_gated_delta_rule",
    "torch_recurrent_gated_delta_rule",
    "chunk_gated_delta_rule",
    "fused_recurrent_gated_delta_rule",
    "causal_conv1d_fn",
    "causal_conv1d_update",
    "torch_causal_conv1d_update",
    "torch_causal_conv1d_fn",
)
_FAST_NAMES = ("chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule", "causal_conv1d_fn", "causal_conv1d_update")


class CallCounter:
    def __init__(self):
        self.calls = {}

    def wrap(self, label, fn):
        def wrapped(*a, **k):
            rec = self.calls.setdefault(label, {"calls": 0, "seq_lens": []})
            rec["calls"] += 1
            x = a[0] if a else next(iter(k.values()))
            try:
                sl = int(x.shape[1]) if "conv" not in label else int(x.shape[-1])
                if sl not in rec["seq_lens"]:
                    rec["seq_lens"].append(sl)
            except Exception:  # noqa: BLE001 - shape probing is best effort
                pass
            return fn(*a, **k)

        wrapped.__wrapped__ = fn
        return wrapped


def force_torch_gdn(family: str, counter: CallCounter) -> dict:
    """Disable FLA / causal-conv1d before the model is built and count calls into the GDN functions.
    Returns a description of what was changed."""
    import importlib

    changed = {}
    mod_names = {
        "qwen3_next": ["transformers.models.qwen3_next.modeling_qwen3_next"],
        "qwen3_5_moe": ["transformers.models.qwen3_5_moe.modeling_qwen3_5_moe"],
    }.get(family, [])
    for mn in mod_names:
        mod = importlib.import_module(mn)
        for fn_name in _GDN_FUNCS:
            if not hasattr(mod, fn_name):
                continue
            f = getattr(mod, fn_name)
            if fn_name in _FAST_NAMES and f is not None and fn_name not in ("causal_conv1d_fn", "causal_conv1d_update"):
                changed[f"{mn}.{fn_name}"] = f"was {getattr(f, '__module__', '?')}.{getattr(f, '__name__', '?')}; set None"
                setattr(mod, fn_name, None)
                continue
            if fn_name in ("causal_conv1d_fn", "causal_conv1d_update") and f is not None:
                src = getattr(f, "__module__", "") or ""
                if src.startswith("causal_conv1d"):
                    changed[f"{mn}.{fn_name}"] = f"was {src}; set None"
                    setattr(mod, fn_name, None)
                    continue
            if f is not None:
                setattr(mod, fn_name, counter.wrap(fn_name, f))
        if hasattr(mod, "is_fast_path_available"):
            changed[f"{mn}.is_fast_path_available"] = str(getattr(mod, "is_fast_path_available"))
            mod.is_fast_path_available = False
        if hasattr(mod, "FusedRMSNormGated") and getattr(mod, "FusedRMSNormGated") is not None:
            changed[f"{mn}.FusedRMSNormGated"] = "set None"
            mod.FusedRMSNormGated = None
    return changed


def rewire_gdn_modules(model, counter: CallCounter) -> list:
    """Modules that captured the kernels as attributes at __init__ (Qwen3-Next style): point them at the
    counted torch fallbacks."""
    import importlib

    notes = []
    for name, m in model.named_modules():
        if not type(m).__name__.endswith("GatedDeltaNet"):
            continue
        mod = importlib.import_module(type(m).__module__)
        for attr, fallback in (
            ("chunk_gated_delta_rule", "torch_chunk_gated_delta_rule"),
            ("recurrent_gated_delta_rule", "torch_recurrent_gated_delta_rule"),
            ("causal_conv1d_update", "torch_causal_conv1d_update"),
        ):
            if hasattr(m, attr) and hasattr(mod, fallback):
                setattr(m, attr, getattr(mod, fallback))
        if hasattr(m, "causal_conv1d_fn"):
            m.causal_conv1d_fn = None
        notes.append(f"{name}: {type(m).__name__} norm={type(m.norm).__name__}")
    return notes


def make_config(golden: dict):
    from transformers import AutoConfig

    d = json.loads(json.dumps(golden["config"]))
    d.pop("architectures", None)
    mt = d.pop("model_type")
    d.pop("torch_dtype", None)
    cfg = AutoConfig.for_model(mt, **d)
    return cfg


def check_config(golden: dict, cfg) -> list:
    """The written config.json must describe the model that is run: compare the values that matter."""
    errs = []
    d = golden["config"]
    tc = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    src = d.get("text_config", d)
    for k in (
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "num_experts",
        "n_routed_experts",
        "n_group",
        "topk_group",
        "routed_scaling_factor",
        "first_k_dense_replace",
        "n_shared_experts",
        "use_qk_norm",
        "attention_bias",
        "num_experts_per_tok",
        "moe_intermediate_size",
        "vocab_size",
        "linear_num_key_heads",
        "linear_num_value_heads",
        "linear_key_head_dim",
        "linear_value_head_dim",
        "shared_expert_intermediate_size",
        "norm_topk_prob",
        "decoder_sparse_step",
        "mlp_only_layers",
        "qkv_bias",
        "num_local_experts",
        "q_lora_rank",
        "kv_lora_rank",
        "qk_nope_head_dim",
        "qk_rope_head_dim",
        "v_head_dim",
        "rope_interleave",
    ):
        if k in src and getattr(tc, k, None) != src[k]:
            errs.append(f"{k}: config.json {src[k]} vs model {getattr(tc, k, None)}")
    rp = getattr(tc, "rope_parameters", None) or {}
    theta = src.get("rope_theta", src.get("rope_parameters", {}).get("rope_theta"))
    prf = src.get("partial_rotary_factor", src.get("rope_parameters", {}).get("partial_rotary_factor", 1.0))
    got_theta = rp.get("rope_theta", getattr(tc, "rope_theta", None))
    got_prf = rp.get("partial_rotary_factor", getattr(tc, "partial_rotary_factor", 1.0))
    if got_theta != theta:
        errs.append(f"rope_theta: config.json {theta} vs model {got_theta}")
    if abs(float(got_prf or 1.0) - float(prf)) > 0:
        errs.append(f"partial_rotary_factor: config.json {prf} vs model {got_prf}")
    if bool(getattr(tc, "tie_word_embeddings", False)) != bool(src.get("tie_word_embeddings", False)):
        errs.append(f"tie_word_embeddings: config.json {src.get('tie_word_embeddings')} vs model {tc.tie_word_embeddings}")
    return errs


def build_model(golden: dict, cfg):
    import torch
    import transformers

    torch.manual_seed(MASTER_SEED)
    fam = golden["family"]
    if fam == "qwen3_5_moe":
        cls = transformers.Qwen3_5MoeForConditionalGeneration
    elif fam == "qwen3_next":
        cls = transformers.Qwen3NextForCausalLM
    elif fam == "qwen3":
        cls = transformers.Qwen3ForCausalLM
    elif fam == "qwen2":
        cls = transformers.Qwen2ForCausalLM
    elif fam == "glm4_moe":
        cls = transformers.Glm4MoeForCausalLM
    elif fam == "qwen2_moe":
        cls = transformers.Qwen2MoeForCausalLM
    elif fam == "mixtral":
        cls = transformers.MixtralForCausalLM
    elif fam == "deepseek_v3":
        cls = transformers.DeepseekV3ForCausalLM
    elif fam == "gpt_oss":  # its eager attention is the reference form with the sinks
        cls = transformers.GptOssForCausalLM
    else:
        cls = transformers.Qwen3MoeForCausalLM
    for c in (cfg, getattr(cfg, "text_config", None)):
        if c is not None:
            try:
                c._attn_implementation = "eager"
            except Exception:  # noqa: BLE001
                pass
    model = cls(cfg).to(torch.float32).eval()
    return model


def capture_decoder_layers(model):
    layers = []
    for name, m in model.named_modules():
        if type(m).__name__.endswith("DecoderLayer") and "visual" not in name and "mtp" not in name:
            layers.append((name, m))
    return layers



# ----------------------------------------------------------------------------------------------
# The multi-token-prediction head (models.md §3.7), as vLLM's qwen3_next_mtp.py computes it
# (Qwen3NextMultiTokenPredictor; its proposer vllm/v1/spec_decode/eagle.py feeds it):
#   row p: x = fc([pre_fc_norm_embedding(embed(t_{p+1})); pre_fc_norm_hidden(h_p)])   (embedding first)
#          z = the MTP decoder layer (full attention + MoE, its own KV cache) at RoPE position p
#          out = mtp.norm(z); logits = lm_head(out)   → the proposal for token p+2
#   h_p is the target's hidden state after its final norm (what its lm_head reads); a chained
#   proposal feeds the head's own `out` of the previous row as h, at the next position.
# The decoder layer and norms are transformers' own classes: the head is a one-layer copy of the
# family's text model (its layers.0 = mtp.layers.0, its norm = mtp.norm; its embedding unused).
# ----------------------------------------------------------------------------------------------


def text_config_of(cfg):
    return cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg


def text_model_of(model):
    """The decoder stack whose final norm feeds lm_head (Qwen3.5: model.model.language_model)."""
    m = model.model
    return getattr(m, "language_model", m)


# DeepSeek-style "nextn" heads (GLM-4.5, DeepSeek-V3: model.layers.{N} after the decoder's), as vLLM's
# deepseek_mtp.py / glm4_moe_mtp.py compute them: the same row with eh_proj / enorm / hnorm for fc and
# its norms, the embedding of the row at position 0 zeroed (`inputs_embeds[positions == 0] = 0`), the
# layer's output z before shared_head.norm returned as the next chained hidden state (eagle.py feeds
# what the head's forward returns), and logits = lm_head(shared_head.norm(z)) (the head shares the
# model's lm_head and embedding, DeepSeek-V3 report §2.2).
NEXTN_FAMILIES = ("glm4_moe", "deepseek_v3")


def make_mtp_head(model, cfg, family: str = ""):
    import copy

    import torch

    nextn = family in NEXTN_FAMILIES

    class MtpHead(torch.nn.Module):
        def __init__(self):
            super().__init__()
            tc = text_config_of(cfg)
            text = text_model_of(model)
            c1 = copy.deepcopy(tc)
            c1.num_hidden_layers = 1
            c1.layer_types = ["full_attention"]
            if hasattr(c1, "mlp_only_layers"):
                c1.mlp_only_layers = []
            if hasattr(c1, "first_k_dense_replace"):
                c1.first_k_dense_replace = 0  # the head's layer is an MoE layer
            if getattr(c1, "mlp_layer_types", None):
                c1.mlp_layer_types = [tc.mlp_layer_types[-1]]
            try:
                c1._attn_implementation = "eager"
            except Exception:  # noqa: BLE001
                pass
            self.block = type(text)(c1)
            norm_cls = type(text.norm)
            h = tc.hidden_size
            self.n_layers = tc.num_hidden_layers
            self.pre_fc_norm_embedding = norm_cls(h, eps=tc.rms_norm_eps)
            self.pre_fc_norm_hidden = norm_cls(h, eps=tc.rms_norm_eps)
            self.fc = torch.nn.Linear(2 * h, h, bias=False)
            if nextn:  # shared_head.norm after the layer, outside the block so z is seen before it
                self.head_norm = norm_cls(h, eps=tc.rms_norm_eps)
                self.block.norm = torch.nn.Identity()

        def checkpoint_parameters(self) -> dict:
            """{checkpoint name: parameter} (the block's unused embedding left out)."""
            out = {}
            if nextn:
                p = f"model.layers.{self.n_layers}."
                names = {"fc.weight": p + "eh_proj.weight", "pre_fc_norm_embedding.weight": p + "enorm.weight",
                         "pre_fc_norm_hidden.weight": p + "hnorm.weight", "head_norm.weight": p + "shared_head.norm.weight"}
            # A sigmoid router's selection bias is a buffer (e_score_correction_bias), stored in checkpoints.
            bias = [(n, b) for n, b in self.named_buffers() if n.endswith("e_score_correction_bias")]
            for n, prm in list(self.named_parameters()) + bias:
                if n.startswith("block.embed_tokens"):
                    continue
                if nextn:
                    out[p + n[len("block.layers.0."):] if n.startswith("block.layers.0.") else names[n]] = prm
                elif n.startswith("block."):
                    out["mtp." + n[len("block."):]] = prm
                else:
                    out["mtp." + n] = prm
            return out

        def forward(self, next_ids, hidden):
            """next_ids [n] (t_{p+1} per row), hidden [n, H] (h_p per row), rows at positions 0..n-1.
            Returns (the next chained hidden rows [n, H]: after mtp.norm, or before shared_head.norm for a
            nextn head; logits [n, V]). A batch of such sequences, each from position 0
            (tools/train_tiny.py trains and evaluates the head so): next_ids [B, n], hidden [B, n, H] ->
            out [B, n, H], logits [B, n, V]."""
            emb = text_model_of(model).embed_tokens(next_ids)
            if nextn:
                emb = emb.clone()
                emb[..., 0, :] = 0.0  # the row at position 0
            x = self.fc(torch.cat([self.pre_fc_norm_embedding(emb), self.pre_fc_norm_hidden(hidden)], dim=-1))
            batched = next_ids.dim() == 2
            out = self.block(inputs_embeds=x if batched else x[None], use_cache=False).last_hidden_state
            if not batched:
                out = out[0]
            if nextn:
                return out, model.lm_head(self.head_norm(out))
            return out, model.lm_head(out)

    return MtpHead().to(torch.float32).eval()


def mtp_reference(head, prompt_ids, final_hidden, first_token, n_chained: int = 2):
    """The head over the prompt (rows 0..T-1: h_p with t_{p+1}; row T-1's next token is the target's
    `first_token`), then `n_chained` chained proposals (each row's next token the argmax of the row
    before, its h the head's own output there). Returns (next tokens [T+n], logits [T+n, V],
    hidden fed [T+n, H])."""
    import torch

    T = len(prompt_ids)
    toks = [int(t) for t in prompt_ids[1:]] + [int(first_token)]
    hid = torch.from_numpy(np.ascontiguousarray(final_hidden, dtype=np.float32))
    with torch.no_grad():
        for _ in range(n_chained + 1):
            out, logits = head(torch.tensor(toks, dtype=torch.long), hid)
            if len(toks) == T + n_chained:
                break
            toks.append(int(logits[-1].argmax()))
            hid = torch.cat([hid, out[-1:]], dim=0)
    return np.array(toks, dtype=np.int32), logits.float().numpy(), hid.float().numpy()


def run_golden(golden: dict, out_dir: str, versions: dict) -> dict:
    import torch
    from transformers import GenerationConfig

    name, fam, layout = golden["name"], golden["family"], golden["layout"]
    gdir = os.path.join(out_dir, name)
    os.makedirs(gdir, exist_ok=True)
    t0 = time.time()
    counter = CallCounter()
    changed = force_torch_gdn(fam, counter)
    cfg = make_config(golden)
    cfg_errs = check_config(golden, cfg)
    if cfg_errs:
        raise RuntimeError(f"[make_goldens] {name}: config mismatch: {cfg_errs}")
    model = build_model(golden, cfg)
    gdn_modules = rewire_gdn_modules(model, counter)

    params = dict(model.named_parameters())
    if fam in NUMPY_PARAM_SHAPES:  # the provisional numpy goldens drew from this table: it must be the model's
        table = NUMPY_PARAM_SHAPES[fam](golden["config"])
        got = {n: tuple(p.shape) for n, p in params.items()}
        if got != table:
            diff = sorted(set(got.items()) ^ set(table.items()))[:8]
            raise RuntimeError(f"[make_goldens] {name}: NUMPY_PARAM_SHAPES['{fam}'] differs from the model: {diff}")
    # A sigmoid router's selection bias is a buffer (GLM's e_score_correction_bias), stored in checkpoints.
    params.update({n: b for n, b in model.named_buffers() if n.endswith("e_score_correction_bias")})
    head = make_mtp_head(model, cfg, fam) if golden.get("mtp") else None
    head_params = head.checkpoint_parameters() if head is not None else {}
    params.update(head_params)
    mem_names = set(params)
    mem = {n: draw_param(name, fam, n, tuple(p.shape), p.detach().cpu().float().numpy()) for n, p in params.items()}
    f32_tensors = golden.get("f32_tensors", ())
    stored, meta, qblock, back_mem = layout_checkpoint(golden, mem, mem_names)
    sd = model.state_dict()
    for n in list(sd):
        if n in back_mem:
            assert tuple(sd[n].shape) == back_mem[n].shape, (n, tuple(sd[n].shape), back_mem[n].shape)
            sd[n] = torch.from_numpy(np.ascontiguousarray(back_mem[n]))
        elif n in mem:
            sd[n] = torch.from_numpy(np.ascontiguousarray(mem[n]))
    # A tied LM head is the embedding (one parameter, listed once by named_parameters): its state_dict
    # entry must carry the stored embedding too, or loading it would put the initial values back.
    if "lm_head.weight" in sd and "lm_head.weight" not in back_mem:
        emb = next(n for n in sd if n.endswith("embed_tokens.weight") and ".visual." not in n)
        sd["lm_head.weight"] = sd[emb]
    model.load_state_dict(sd, strict=True)
    if head is not None:  # the head's weights: the stored values too
        with torch.no_grad():
            for n, prm in head_params.items():
                assert tuple(prm.shape) == back_mem[n].shape, (n, tuple(prm.shape), back_mem[n].shape)
                prm.copy_(torch.from_numpy(np.ascontiguousarray(back_mem[n])))

    # config.json: as written in GOLDENS, or as transformers' own save_pretrained writes it (the spelling
    # of a checkpoint saved by transformers 5, which loaders must read too)
    cfg_json = json.loads(json.dumps(golden["config"]))
    if golden.get("config_writer") == "save_pretrained":
        cfg_json = saved_config(cfg)
    write_config_json(golden, gdir, cfg_json, qblock)
    write_safetensors(os.path.join(gdir, "model.safetensors"), stored, meta)

    # reference run
    V = cfg.get_text_config().vocab_size if hasattr(cfg, "get_text_config") else cfg.vocab_size
    ids = prompt_ids(name, V)
    input_ids = torch.from_numpy(ids)[None]
    hidden = {}
    hooks = []
    for li, (lname, layer) in enumerate(capture_decoder_layers(model)):

        def hook(_m, _inp, out, li=li):
            hidden[li] = (out[0] if isinstance(out, tuple) else out).detach()[0].float().numpy().copy()

        hooks.append(layer.register_forward_hook(hook))
    router_logits = []  # the TopKRouter modules return (router_logits (pre-softmax), scores, indices)

    def rhook(_m, _inp, out):
        t = out[0] if isinstance(out, tuple) else out
        router_logits.append(t.detach().float().reshape(-1, t.shape[-1]).numpy().copy())

    for n, m in model.named_modules():
        if n.endswith(("mlp.gate", "mlp.router")) and "visual" not in n:  # gpt-oss: mlp.router
            hooks.append(m.register_forward_hook(rhook))
    final_hidden = {}

    def fhook(_m, _inp, out):
        final_hidden["rows"] = (out[0] if isinstance(out, tuple) else out).detach()[0].float().numpy().copy()

    fh = text_model_of(model).norm.register_forward_hook(fhook)
    with torch.no_grad():
        out = model(input_ids=input_ids, use_cache=False)
    fh.remove()
    for h in hooks[: len(hidden)]:
        h.remove()
    logits = out.logits[0].float().numpy().copy()
    prefill_calls = json.loads(json.dumps(counter.calls))

    # greedy decode with the cache (generate: prefill then one token per step)
    counter.calls.clear()
    gen_cfg = GenerationConfig(
        do_sample=False, max_new_tokens=N_GREEDY, eos_token_id=None, pad_token_id=0,
        bos_token_id=None, use_cache=True, num_beams=1, repetition_penalty=1.0, temperature=None, top_p=None, top_k=None,
    )
    # generate() merges its arguments over model.generation_config (which carries the config's eos id):
    # replace it so no eos can stop the 12 steps early.
    model.generation_config = gen_cfg
    with torch.no_grad():
        g = model.generate(
            input_ids=input_ids, attention_mask=torch.ones_like(input_ids), output_logits=True,
            return_dict_in_generate=True,
        )
    decode_calls = json.loads(json.dumps(counter.calls))
    for h in hooks:
        h.remove()
    greedy_ids = g.sequences[0, PROMPT_LEN:].numpy().astype(np.int32)
    greedy_logits = torch.stack([x[0] for x in g.logits]).float().numpy()
    assert greedy_ids.shape == (N_GREEDY,), greedy_ids.shape
    argmax_ok = bool((greedy_logits.argmax(-1) == greedy_ids).all())
    # cross-check: full forward (no cache) over prompt + greedy tokens reproduces the decode logits
    full_ids = torch.cat([input_ids, torch.from_numpy(greedy_ids.astype(np.int64))[None, :-1]], dim=1)
    with torch.no_grad():
        full = model(input_ids=full_ids, use_cache=False).logits[0].float().numpy()
    dec_vs_full = float(np.abs(full[PROMPT_LEN - 1 :] - greedy_logits).max())
    prefill_vs_gen0 = float(np.abs(logits[-1] - greedy_logits[0]).max())

    # margins (how fragile the golden is to rounding)
    srt = np.sort(greedy_logits, axis=-1)
    min_greedy_margin = float((srt[:, -1] - srt[:, -2]).min())
    tcfg = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    k = getattr(tcfg, "num_experts_per_tok", None)  # None: a dense model, no router
    try:
        if k is None:
            raise ValueError("no router (dense model)")
        margins = []
        # A sigmoid router chooses on sigmoid(logit) + bias (groups aside): the margin in that space.
        biases = [m.e_score_correction_bias.detach().float().numpy() for n, m in model.named_modules()
                  if n.endswith("mlp.gate") and hasattr(m, "e_score_correction_bias")]
        for i, p in enumerate(router_logits[: len(capture_decoder_layers(model))]):
            if biases:
                p = 1.0 / (1.0 + np.exp(-p)) + biases[i % len(biases)]
            ps = np.sort(p, axis=-1)[:, ::-1]
            margins.append(float((ps[:, k - 1] - ps[:, k]).min()))
        min_router_margin = min(margins) if margins else None
    except Exception as e:  # noqa: BLE001 - diagnostic only
        min_router_margin = f"unavailable: {e}"

    # round trip through from_pretrained for HF layouts: proves the file is what transformers loads
    roundtrip = None
    if layout == "hf":
        try:
            cls = type(model)
            m2, info = cls.from_pretrained(gdir, torch_dtype=torch.float32, attn_implementation="eager", output_loading_info=True)
            rewire_gdn_modules(m2, CallCounter())
            m2.eval()
            with torch.no_grad():
                l2 = m2(input_ids=input_ids, use_cache=False).logits[0].float().numpy()
            roundtrip = {
                "max_abs_logit_diff": float(np.abs(l2 - logits).max()),
                "missing_keys": sorted(info.get("missing_keys", []))[:20],
                "unexpected_keys": sorted(info.get("unexpected_keys", []))[:20],
                "mismatched_keys": [str(x) for x in info.get("mismatched_keys", [])][:20],
            }
        except Exception as e:  # noqa: BLE001
            roundtrip = {"error": f"{type(e).__name__}: {e}"}
    notes = golden["notes"]
    if layout == "mxfp4":
        roundtrip = mxfp4_from_pretrained_check(type(model), gdir, back_mem, input_ids, logits)
        if "error" in roundtrip:
            notes += (". transformers' MXFP4 loader could not run here (" + roundtrip["error"] + "): the reference "
                      "uses this script's dequantised experts loaded into the float32 model")
        else:
            notes += (". transformers' own loader (from_pretrained with Mxfp4Config(dequantize=True)) dequantises "
                      "the experts to exactly this script's values (checks.from_pretrained_roundtrip)")
    clip = gpt_oss_clip_counts(model, input_ids) if fam == "gpt_oss" else None
    if clip is not None:
        notes += (f". The clamp at {clip['limit']} clipped {clip['gate_clipped']} gate and {clip['up_clipped']} up "
                  f"values of the prompt's {clip['expert_rows']} (token, expert) rows x {clip['intermediate']}")

    tensors = {
        "input_ids": ("I32", ids.astype(np.int32)),
        "logits": ("F32", logits.astype(np.float32)),
        "greedy_ids": ("I32", greedy_ids),
        "greedy_logits": ("F32", greedy_logits.astype(np.float32)),
    }
    for li in sorted(hidden):
        tensors[f"hidden_{li}"] = ("F32", hidden[li].astype(np.float32))
    mtp_checks = None
    if head is not None:
        # final_hidden: the target's normed hidden rows; check they are what its lm_head reads.
        fh_rows = final_hidden["rows"]
        with torch.no_grad():
            relogit = model.lm_head(torch.from_numpy(fh_rows)).float().numpy()
        mtp_toks, mtp_logits, mtp_hidden = mtp_reference(head, ids, fh_rows, int(greedy_ids[0]))
        tensors["final_hidden"] = ("F32", fh_rows.astype(np.float32))
        tensors["mtp_tokens"] = ("I32", mtp_toks)
        tensors["mtp_logits"] = ("F32", mtp_logits.astype(np.float32))
        tensors["mtp_hidden"] = ("F32", mtp_hidden.astype(np.float32))
        srt_m = np.sort(mtp_logits, axis=-1)
        mtp_checks = {
            "final_hidden_relogit_max_abs_diff": float(np.abs(relogit - logits).max()),
            "mtp_rows": int(mtp_logits.shape[0]),
            "mtp_chained": int(mtp_logits.shape[0] - PROMPT_LEN),
            "mtp_min_top2_margin_chained": float((srt_m[PROMPT_LEN - 1 :, -1] - srt_m[PROMPT_LEN - 1 :, -2]).min()),
            "mtp_logits_std": float(mtp_logits.std()),
        }
    write_safetensors(os.path.join(gdir, "golden.safetensors"), tensors, {"format": "pt"})

    chunk_ran = "torch_chunk_gated_delta_rule" in prefill_calls
    rec_ran = "torch_recurrent_gated_delta_rule" in decode_calls
    fast_ran = any(k in prefill_calls or k in decode_calls for k in ("chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule"))
    info = {
        "name": name,
        "family": fam,
        "layout": layout,
        "bits": golden.get("bits", 16),
        "group_size": golden.get("group_size"),
        "quantization": qblock if qblock is not None else golden.get("quantization_config"),
        "weight_dtype": weight_dtype_of(golden),
        "f32_tensors": list(f32_tensors),
        "prompt_len": PROMPT_LEN,
        "n_greedy": N_GREEDY,
        "vocab_size": int(V),
        "num_decoder_layers": len(hidden),
        "reference": "transformers float32 on CPU, eager attention; weights = exact values stored in "
        "model.safetensors (bf16 -> f32; MLX: w = f32(scale)*q + f32(bias); +1 folded norms read back as w-1)",
        "model_class": type(model).__name__,
        "experts_implementation": str(getattr(cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg, "_experts_implementation", None)),
        "attn_implementation": str(getattr(cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg, "_attn_implementation", None)),
        "versions": versions,
        "gdn_path": None
        if fam not in ("qwen3_next", "qwen3_5_moe")
        else {
            "prefill": "torch_chunk_gated_delta_rule" if chunk_ran and not fast_ran else "UNKNOWN",
            "decode": "torch_recurrent_gated_delta_rule" if rec_ran and not fast_ran else "UNKNOWN",
            "prefill_calls": prefill_calls,
            "decode_calls": decode_calls,
            "patched": changed,
            "modules": gdn_modules,
        },
        "checks": {
            "greedy_argmax_consistent": argmax_ok,
            "decode_vs_full_forward_max_abs_diff": dec_vs_full,
            "prefill_last_vs_generate_first_max_abs_diff": prefill_vs_gen0,
            "min_greedy_top2_margin": min_greedy_margin,
            "min_router_topk_logit_margin": min_router_margin,
            "logits_std": float(logits.std()),
            "from_pretrained_roundtrip": roundtrip,
            "mtp": mtp_checks,
            **({"swiglu_clamp": clip} if clip is not None else {}),
        },
        "seconds": round(time.time() - t0, 2),
        "notes": notes
        + ". greedy_logits[0] is the last prefill row (from generate's prefill); rows 1..11 come from "
        "single-token decode steps with the cache.",
    }
    with open(os.path.join(gdir, "golden.json"), "w") as f:
        json.dump(info, f, indent=2)
        f.write("\n")
    return info


def mxfp4_from_pretrained_check(cls, gdir: str, back_mem: dict, input_ids, logits) -> dict:
    """Load the MXFP4 checkpoint as users do (transformers' Mxfp4 quantizer, dequantize=True) and require
    its dequantised experts to equal this script's reader bit for bit. Returns the check's record, or
    {"error": ...} when the loader cannot run here (the caller says so in the notes)."""
    import torch

    try:
        from transformers import Mxfp4Config

        m2, info = None, None
        errors = []
        for kw in ({"device_map": "cpu"}, {}):
            try:
                m2, info = cls.from_pretrained(gdir, quantization_config=Mxfp4Config(dequantize=True), torch_dtype=torch.bfloat16,
                                               attn_implementation="eager", output_loading_info=True, **kw)
                break
            except Exception as e:  # noqa: BLE001
                errors.append(f"{kw}: {type(e).__name__}: {e}")
        if m2 is None:
            return {"error": "; ".join(errors)[:600]}
    except Exception as e:  # noqa: BLE001
        return {"error": f"{type(e).__name__}: {e}"[:600]}
    sd2 = m2.state_dict()
    compared, differ = 0, []
    for n, a in back_mem.items():
        if ".mlp.experts." not in n:
            continue
        got = sd2[n].detach().to("cpu").float().numpy()
        compared += 1
        if got.shape != a.shape or not np.array_equal(got, a):
            differ.append(n)
    if differ:
        raise RuntimeError(f"[make_goldens] transformers' MXFP4 dequantisation differs from ours: {differ[:6]} "
                           f"(loader's missing keys {sorted(info.get('missing_keys', []))[:6]}, unexpected "
                           f"{sorted(info.get('unexpected_keys', []))[:6]})")
    try:  # the loaded model's own logits, in float32 (a quantized model may refuse the cast: recorded)
        m2 = m2.to(torch.float32).eval()
        with torch.no_grad():
            l2 = m2(input_ids=input_ids.to(next(m2.parameters()).device), use_cache=False).logits[0].float().cpu().numpy()
        logit_diff = float(np.abs(l2 - logits).max())
    except Exception as e:  # noqa: BLE001
        logit_diff = f"unavailable: {type(e).__name__}: {e}"[:300]
    return {
        "loader": "from_pretrained(quantization_config=Mxfp4Config(dequantize=True))",
        "experts_compared": compared,
        "experts_bit_exact": True,
        "max_abs_logit_diff": logit_diff,
        "missing_keys": sorted(info.get("missing_keys", []))[:20],
        "unexpected_keys": sorted(info.get("unexpected_keys", []))[:20],
        "mismatched_keys": [str(x) for x in info.get("mismatched_keys", [])][:20],
    }


def gpt_oss_clip_counts(model, input_ids) -> dict:
    """How many gate/up values the swiglu clamp changes in a prefill of the prompt: every experts module's
    _apply_gate wrapped (the eager and grouped_mm experts forwards both call it)."""
    import torch

    counts = {"gate_clipped": 0, "up_clipped": 0, "expert_rows": 0}
    patched = []
    for _n, m in model.named_modules():
        if hasattr(m, "_apply_gate") and hasattr(m, "limit"):
            orig = m._apply_gate

            def wrapped(gate_up, orig=orig, m=m):
                gate, up = gate_up[..., ::2], gate_up[..., 1::2]
                counts["gate_clipped"] += int((gate > m.limit).sum())
                counts["up_clipped"] += int((up.abs() > m.limit).sum())
                counts["expert_rows"] += int(gate_up.reshape(-1, gate_up.shape[-1]).shape[0])
                return orig(gate_up)

            m._apply_gate = wrapped
            patched.append(m)
    with torch.no_grad():
        model(input_ids=input_ids, use_cache=False)
    for m in patched:
        del m._apply_gate
    tc = text_config_of(model.config)
    counts.update({"limit": 7.0, "intermediate": int(tc.intermediate_size), "source": "transformers prefill"})
    if counts["expert_rows"] == 0:
        counts["note"] = "_apply_gate was not called: the experts implementation bypasses it"
    return counts


# ----------------------------------------------------------------------------------------------
# Provisional goldens (--numpy-reference): where transformers is not installed, the same checkpoint
# with reference tensors from tools/check_goldens.py's numpy Model. They only stand in until the
# transformers run: golden.json says so in "reference", the index lists them under "provisional" (the
# C++ tests iterate "goldens" only), and a transformers run rewrites every file, dropping both marks.
# Rejected: a numpy reference as a permanent source — it is the oracle the goldens are meant to check.
# ----------------------------------------------------------------------------------------------

PROVISIONAL_REFERENCE = ("PROVISIONAL numpy (tools/check_goldens.py); regenerate with transformers on the GPU machine: "
                         "python3 tools/make_goldens.py --only gpt_oss_hf_bf16 --only gpt_oss_hf_mxfp4")

# GptOssConfig's fields that save_pretrained writes beside the golden's own (transformers 5.17 defaults)
_SAVED_DEFAULTS = {"gpt_oss": {"initializer_range": 0.02, "output_router_logits": False, "router_aux_loss_coef": 0.001}}


def predicted_saved_config(golden: dict) -> dict:
    """config.json as save_pretrained is expected to write it (sorted keys, no architectures / torch_dtype,
    the config class's defaults filled in); the transformers run replaces it with the real one."""
    d = json.loads(json.dumps(golden["config"]))
    d.pop("architectures", None)
    d.pop("torch_dtype", None)
    for k, v in _SAVED_DEFAULTS.get(golden["family"], {}).items():
        d.setdefault(k, v)
    d["transformers_version"] = "5.17.0"
    return dict(sorted(d.items()))


def run_golden_numpy(golden: dict, out_dir: str) -> dict:
    """The golden's files with check_goldens' numpy Model as the reference (provisional; see above)."""
    name, fam = golden["name"], golden["family"]
    if fam not in NUMPY_PARAM_SHAPES:
        raise SystemExit(f"[make_goldens] --numpy-reference: no parameter table for family '{fam}' ({name}); "
                         f"it is only for provisional goldens of {sorted(NUMPY_PARAM_SHAPES)}")
    spec = importlib.util.spec_from_file_location("check_goldens", os.path.join(os.path.dirname(os.path.abspath(__file__)), "check_goldens.py"))
    cg = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cg)
    gdir = os.path.join(out_dir, name)
    os.makedirs(gdir, exist_ok=True)
    t0 = time.time()
    shapes = NUMPY_PARAM_SHAPES[fam](golden["config"])
    mem = {n: draw_param(name, fam, n, shp, np.zeros(shp, np.float32)) for n, shp in shapes.items()}
    stored, meta, qblock, back_mem = layout_checkpoint(golden, mem, set(mem))
    write_config_json(golden, gdir, predicted_saved_config(golden), qblock)
    write_safetensors(os.path.join(gdir, "model.safetensors"), stored, meta)

    model = cg.Model(gdir, fam)
    for n, a in back_mem.items():  # check_goldens' own reader must see the values this script's reader does
        if not np.array_equal(model.w[n], a):
            raise RuntimeError(f"[make_goldens] {name}: check_goldens reads {n} differently")
    c = golden["config"]
    V = c["vocab_size"]
    ids = prompt_ids(name, V)
    logits, hidden = model.forward(ids)
    stats = json.loads(json.dumps(model.stats))
    router_logits = [r.copy() for r in model.router_logits]
    seq, rows = ids, [logits[-1]]
    greedy = [int(np.argmax(logits[-1]))]
    while len(greedy) < N_GREEDY:  # no cache here: each step one forward over prompt + tokens so far
        seq = np.concatenate([ids, np.array(greedy, np.int64)])
        rows.append(model.forward(seq)[0][-1])
        greedy.append(int(np.argmax(rows[-1])))
    greedy_ids = np.array(greedy, np.int32)
    greedy_logits = np.stack(rows).astype(np.float32)
    srt = np.sort(greedy_logits, axis=-1)
    k = c["num_experts_per_tok"]
    router_margin = min(float((np.sort(r, -1)[:, ::-1][:, k - 1] - np.sort(r, -1)[:, ::-1][:, k]).min()) for r in router_logits)

    tensors = {
        "input_ids": ("I32", ids.astype(np.int32)),
        "logits": ("F32", logits.astype(np.float32)),
        "greedy_ids": ("I32", greedy_ids),
        "greedy_logits": ("F32", greedy_logits),
    }
    for li, h in enumerate(hidden):
        tensors[f"hidden_{li}"] = ("F32", h.astype(np.float32))
    write_safetensors(os.path.join(gdir, "golden.safetensors"), tensors, {"format": "pt"})
    clip = {"gate_clipped": stats["gate_clipped"], "up_clipped": stats["up_clipped"], "expert_rows": stats["expert_rows"],
            "limit": 7.0, "intermediate": c["intermediate_size"], "source": "numpy prefill"}
    info = {
        "name": name,
        "family": fam,
        "layout": golden["layout"],
        "bits": golden.get("bits", 16),
        "group_size": golden.get("group_size"),
        "quantization": qblock if qblock is not None else golden.get("quantization_config"),
        "weight_dtype": weight_dtype_of(golden),
        "f32_tensors": list(golden.get("f32_tensors", ())),
        "prompt_len": PROMPT_LEN,
        "n_greedy": N_GREEDY,
        "vocab_size": int(V),
        "num_decoder_layers": len(hidden),
        "reference": PROVISIONAL_REFERENCE,
        "model_class": golden["config"]["architectures"][0],
        "experts_implementation": None,
        "attn_implementation": None,
        "versions": {"python": platform.python_version(), "numpy": np.__version__, "torch": None, "transformers": None},
        "gdn_path": None,
        "checks": {
            "greedy_argmax_consistent": bool((greedy_logits.argmax(-1) == greedy_ids).all()),
            "decode_vs_full_forward_max_abs_diff": None,
            "prefill_last_vs_generate_first_max_abs_diff": None,
            "min_greedy_top2_margin": float((srt[:, -1] - srt[:, -2]).min()),
            "min_router_topk_logit_margin": router_margin,
            "logits_std": float(logits.std()),
            "from_pretrained_roundtrip": None,
            "mtp": None,
            "swiglu_clamp": clip,
            "sink_share": stats["sink_share"],
        },
        "seconds": round(time.time() - t0, 2),
        "notes": golden["notes"]
        + f". The clamp at 7 clipped {clip['gate_clipped']} gate and {clip['up_clipped']} up values of the prompt's "
        f"{clip['expert_rows']} (token, expert) rows x {clip['intermediate']}. PROVISIONAL: logits, hidden states and "
        "greedy rows from check_goldens' numpy forward (greedy rows 1..11 from full forwards over the prompt and the "
        "tokens so far, not a cached decode); config.json is this script's prediction of save_pretrained's; no "
        "transformers load was checked",
    }
    with open(os.path.join(gdir, "golden.json"), "w") as f:
        json.dump(info, f, indent=2)
        f.write("\n")
    return info


def saved_config(cfg) -> dict:
    """The config.json that cfg.save_pretrained() writes."""
    import tempfile

    with tempfile.TemporaryDirectory() as td:
        cfg.save_pretrained(td)
        with open(os.path.join(td, "config.json")) as f:
            return json.load(f)


def save_configs(dst: str) -> list:
    """Every golden's config as transformers writes it (save_pretrained of the config it builds from
    the golden's): DST/NAME.json. Loaders must read both spellings to the same model."""
    os.makedirs(dst, exist_ok=True)
    failed = []
    for g in GOLDENS:
        try:
            d = saved_config(make_config(g))
            with open(os.path.join(dst, g["name"] + ".json"), "w") as f:
                json.dump(d, f, indent=2, sort_keys=True)
                f.write("\n")
        except Exception:  # noqa: BLE001
            traceback.print_exc()
            failed.append(g["name"])
    return failed


def versions_info() -> dict:
    import torch
    import transformers

    v = {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__, "numpy": np.__version__}
    for mod in ("fla", "causal_conv1d", "kernels", "safetensors"):
        try:
            m = __import__(mod)
            v[mod] = getattr(m, "__version__", "present")
        except Exception:  # noqa: BLE001
            v[mod] = None
    return v


def dump_sources(dst: str) -> None:
    import transformers

    root = os.path.dirname(transformers.__file__)
    os.makedirs(dst, exist_ok=True)
    for fam in ("qwen3", "qwen3_moe", "qwen3_next", "qwen3_5_moe", "qwen3_5", "qwen2_moe", "qwen3_vl_moe", "qwen3_vl",
                "glm4_moe", "deepseek_v3", "mixtral", "gpt_oss", "olmoe"):
        d = os.path.join(root, "models", fam)
        if not os.path.isdir(d):
            continue
        for fn in os.listdir(d):
            if fn.startswith(("modeling_", "configuration_", "modular_")) and fn.endswith(".py"):
                shutil.copy(os.path.join(d, fn), os.path.join(dst, fn))
    for rel in ("conversion_mapping.py", "modeling_rope_utils.py", "integrations/moe.py", "integrations/hub_kernels.py", "core_model_loading.py"):
        p = os.path.join(root, rel)
        if os.path.exists(p):
            shutil.copy(p, os.path.join(dst, rel.replace("/", "__")))


# ----------------------------------------------------------------------------------------------
# numpy-only self test (runs anywhere)
# ----------------------------------------------------------------------------------------------


def selftest() -> int:
    import tempfile

    rng = np.random.default_rng(1)
    fails = 0
    # bf16 rounding: round-to-nearest-even on ties
    x = np.array([1.0, 1.0 + 2**-8, 1.0 + 3 * 2**-8, -2.5, 3.0e-3], dtype=np.float32)
    r = round_bf16(x)
    exp = np.array([1.0, 1.0, 1.0 + 4 * 2**-8, -2.5, round(3.0e-3 * 2**16) / 2**16], dtype=np.float32)
    if not np.allclose(r[:4], exp[:4], atol=0, rtol=0):
        print("FAIL bf16 rounding", r, exp)
        fails += 1
    for bits, gs in ((4, 32), (4, 64), (8, 64), (8, 128), (2, 32)):
        w = round_bf16(rng.normal(0, 0.1, size=(3, 5, 256)).astype(np.float32))
        pk, s, b = mlx_affine_quantize(w, bits, gs)
        if pk.shape != (3, 5, 256 * bits // 32) or s.shape != (3, 5, 256 // gs):
            print("FAIL shapes", bits, gs, pk.shape, s.shape)
            fails += 1
        # independent unpack of element (r, i): word i//per, shift bits*(i%per)
        per = 32 // bits
        for i in (0, 1, per - 1, per, 255):
            q_ref = (int(pk[1, 2, i // per]) >> (bits * (i % per))) & ((1 << bits) - 1)
            if unpack_codes(pk, bits)[1, 2, i] != q_ref:
                print("FAIL unpack", bits, i)
                fails += 1
        deq = mlx_dequantize(pk, s, b, bits, gs)
        # MLX makes the larger-magnitude edge exact (s = edge/round(edge/s)), which can shrink the step
        # and clip the other edge: the error bound is ~1 step, not half a step.
        err = np.abs(deq - w)
        step = np.repeat(np.abs(bf16_bits_to_f32(s)), gs, axis=-1)
        if not (err <= 1.5 * step + 1e-6).all():
            print(f"FAIL quant error bits={bits} gs={gs}: {(err / step).max()} steps")
            fails += 1
        # the edge with the larger magnitude is reproduced up to bf16 rounding of the bias
        g = w.reshape(3, 5, 256 // gs, gs)
        edge = np.where(np.abs(g.min(-1)) > np.abs(g.max(-1)), g.min(-1), g.max(-1))
        if not np.allclose(bf16_bits_to_f32(b), round_bf16(edge), rtol=0, atol=0):
            print(f"FAIL bias != edge bits={bits}")
            fails += 1
    # safetensors round trip
    with tempfile.TemporaryDirectory() as td:
        p = os.path.join(td, "t.safetensors")
        t = {"a": ("F32", rng.normal(size=(2, 3)).astype(np.float32)), "b": ("U32", np.arange(6, dtype=np.uint32).reshape(3, 2)),
             "c": ("BF16", f32_to_bf16_bits(np.ones((5,), np.float32))), "d": ("I32", np.array([7, -1], np.int32))}
        write_safetensors(p, t, {"format": "mlx"})
        back, meta = read_safetensors(p)
        with open(p, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
        if n % 8 or meta != {"format": "mlx"} or any(not np.array_equal(back[k][1], t[k][1]) or back[k][0] != t[k][0] for k in t):
            print("FAIL safetensors round trip")
            fails += 1
    # layout round trips on synthetic in-memory dicts
    for fam in ("qwen3_moe", "qwen3_next", "qwen3_5_moe"):
        pre = "model.language_model." if fam == "qwen3_5_moe" else "model."
        mem = {
            f"{pre}embed_tokens.weight": rng.normal(size=(32, 64)).astype(np.float32),
            f"{pre}norm.weight": rng.normal(size=(64,)).astype(np.float32) * 0.1,
            f"{pre}layers.0.input_layernorm.weight": rng.normal(size=(64,)).astype(np.float32) * 0.1,
            f"{pre}layers.0.self_attn.q_norm.weight": rng.normal(size=(16,)).astype(np.float32) * 0.1,
            f"{pre}layers.0.linear_attn.norm.weight": 1 + rng.normal(size=(8,)).astype(np.float32) * 0.1,
            f"{pre}layers.0.linear_attn.conv1d.weight": rng.normal(size=(40, 1, 4)).astype(np.float32),
            f"{pre}layers.0.linear_attn.A_log": rng.normal(size=(4,)).astype(np.float32),
            f"{pre}layers.0.mlp.gate.weight": rng.normal(size=(4, 64)).astype(np.float32),
            f"{pre}layers.0.mlp.experts.gate_up_proj": rng.normal(size=(4, 2 * 64, 64)).astype(np.float32),
            f"{pre}layers.0.mlp.experts.down_proj": rng.normal(size=(4, 64, 64)).astype(np.float32),
            "lm_head.weight": rng.normal(size=(32, 64)).astype(np.float32),
        }
        if fam == "qwen3_5_moe":
            mem["model.visual.blocks.0.attn.qkv.weight"] = rng.normal(size=(96, 32)).astype(np.float32)
        hf = mem_to_hf(fam, mem)
        if fam != "qwen3_5_moe" and f"{pre}layers.0.mlp.experts.3.up_proj.weight" not in hf:
            print("FAIL per-expert split", fam)
            fails += 1
        f32t = ("A_log",)
        hf_r = {n: (a if n.endswith("A_log") else round_bf16(a)) for n, a in hf.items()}
        mlx = hf_to_mlx_names(fam, hf_r)
        if fam == "qwen3_5_moe" and "language_model.lm_head.weight" not in mlx:
            print("FAIL q35 names", sorted(mlx)[:5])
            fails += 1
        if any(".visual." in n for n in mlx):
            print("FAIL visual not dropped")
            fails += 1
        for bits, gs in ((4, 64), (8, 64)):
            stored, qb = build_mlx_checkpoint(fam, mlx, bits, gs, f32t)
            back = hf_to_mem(fam, mlx_to_hf_names(fam, read_mlx_checkpoint(stored, qb)), set(mem))
            for n in mem:
                if ".visual." in n:
                    continue
                ref = hf_r.get(n)
                if ref is None:  # fused in memory (qwen3_5_moe)
                    ref = hf_to_mem(fam, hf_r, set(mem))[n]
                if fam != "qwen3_moe" and n.endswith(_ZC_NORM_SUFFIXES):
                    ref = round_bf16(ref + np.float32(1)) - np.float32(1)  # the folded +1 is rounded
                exact = mem[n].ndim == 1 or "conv1d" in n or n.endswith("A_log")
                tol = 0.0 if exact else 1.5 * 2.0 / ((1 << (8 if n.endswith("mlp.gate.weight") else bits)) - 1)
                err = np.abs(back[n] - ref).max() / (np.abs(ref).max() + 1e-9)
                if err > tol:
                    print(f"FAIL mlx round trip {fam} {n} bits={bits}: rel err {err}")
                    fails += 1
            gate = [k for k in qb if k.endswith("mlp.gate")]
            if len(gate) != 1 or qb[gate[0]] != {"group_size": 64, "bits": 8}:
                print("FAIL router override", fam, qb)
                fails += 1
            if fam == "qwen3_5_moe" and not gate[0].startswith("language_model.model.layers.0"):
                print("FAIL q35 override path", gate)
                fails += 1
            sw = [k for k in stored if "switch_mlp.gate_proj.weight" in k]
            if len(sw) != 1 or stored[sw[0]][1].shape != (4, 64, 64 * bits // 32):
                print("FAIL switch_mlp", fam, sw, [stored[k][1].shape for k in sw])
                fails += 1
            conv = [k for k in stored if k.endswith("conv1d.weight")][0]
            if stored[conv][1].shape != (40, 4, 1):
                print("FAIL conv layout", stored[conv][1].shape)
                fails += 1
            nrm = [k for k in stored if k.endswith("layers.0.input_layernorm.weight")][0]
            exp_n = round_bf16(hf_r[f"{pre}layers.0.input_layernorm.weight"] + (1.0 if fam != "qwen3_moe" else 0.0))
            if not np.array_equal(bf16_bits_to_f32(stored[nrm][1]), exp_n):
                print("FAIL norm +1", fam)
                fails += 1
            la = [k for k in stored if k.endswith("linear_attn.norm.weight")][0]
            if not np.array_equal(bf16_bits_to_f32(stored[la][1]), hf_r[f"{pre}layers.0.linear_attn.norm.weight"]):
                print("FAIL linear_attn.norm must not shift", fam)
                fails += 1
        # hf round trip is exact
        back = hf_to_mem(fam, read_hf_checkpoint(build_hf_checkpoint(hf, f32t)), set(mem))
        for n in mem:
            if not np.array_equal(back[n], mem[n] if n.endswith("A_log") else round_bf16(mem[n])):
                print("FAIL hf round trip", fam, n)
                fails += 1
    # MXFP4: codes + scales -> values -> codes + scales is the identity when every block holds a +-6 (the
    # encoder picks the smallest scale that fits, so only then is the encoding unique), bit for bit
    codes = rng.integers(0, 16, size=(3, 6, 4, 32)).astype(np.uint8)
    codes[..., 5] = rng.choice([7, 15], size=codes.shape[:-1])
    blocks = (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)
    scales = rng.integers(127 - 10, 127 + 4, size=(3, 6, 4)).astype(np.uint8)
    vals = mxfp4_dequantize(blocks, scales)
    b2, s2 = mxfp4_quantize(vals)
    if vals.shape != (3, 6, 128) or not (np.array_equal(b2, blocks) and np.array_equal(s2, scales)):
        print("FAIL mxfp4 round trip (codes -> values -> codes)")
        fails += 1
    # element order, per element from the spec: byte j of a block = element 2j (low nibble) | 2j+1 (high)
    for (e, r, blk, i) in ((0, 0, 0, 0), (1, 2, 3, 1), (2, 5, 1, 30), (2, 5, 3, 31)):
        byte = int(blocks[e, r, blk, i // 2])
        nib = (byte >> 4) if i % 2 else (byte & 15)
        want = FP4_VALUES[nib] * 2.0 ** (int(scales[e, r, blk]) - 127)
        if vals[e, r, blk * 32 + i] != np.float32(want) or np.signbit(vals[e, r, blk * 32 + i]) != np.signbit(want):
            print("FAIL mxfp4 element", e, r, blk, i)
            fails += 1
    if not np.array_equal(vals, round_bf16(vals)):
        print("FAIL mxfp4 values not bf16-exact")
        fails += 1
    # quantising a normal draw: within half an FP4 step of the value (step <= 2 * 2^e), idempotent
    w = rng.normal(0, 0.3, size=(2, 8, 64)).astype(np.float32)
    b3, s3 = mxfp4_quantize(w)
    d3 = mxfp4_dequantize(b3, s3)
    step = np.repeat(np.exp2(s3.astype(np.float64) - 127), 32, axis=-1)
    if not (np.abs(d3 - w) <= step + 1e-12).all():  # the widest FP4 gap is 2 (4 -> 6): half of it is 1 step
        print("FAIL mxfp4 quantisation error")
        fails += 1
    b4, s4 = mxfp4_quantize(d3)
    if not np.array_equal(mxfp4_dequantize(b4, s4), d3):
        print("FAIL mxfp4 not idempotent")
        fails += 1
    # the gpt-oss layout: [E, in, out] experts <-> NAME_blocks [E, out, in/32, 16] and back
    hf = {"model.layers.0.mlp.experts.gate_up_proj": d3.reshape(2, 8, 64).transpose(0, 2, 1).copy(),
          "model.layers.0.mlp.experts.gate_up_proj_bias": round_bf16(rng.normal(size=(2, 8)).astype(np.float32))}
    st = build_mxfp4_checkpoint(hf, ())
    if st["model.layers.0.mlp.experts.gate_up_proj_blocks"][1].shape != (2, 8, 2, 16) or \
            st["model.layers.0.mlp.experts.gate_up_proj_scales"][1].shape != (2, 8, 2):
        print("FAIL mxfp4 checkpoint shapes")
        fails += 1
    back = read_mxfp4_checkpoint(st)
    if any(not np.array_equal(back[n], hf[n]) for n in hf):
        print("FAIL mxfp4 checkpoint round trip")
        fails += 1
    print(f"selftest: {fails} failed")
    return 1 if fails else 0


def main_numpy_reference(args) -> int:
    if not args.only:
        raise SystemExit("[make_goldens] --numpy-reference needs --only NAME (provisional goldens are made one by one)")
    os.makedirs(args.out, exist_ok=True)
    index_path = os.path.join(args.out, "index.json")
    index = {"generator": "tools/make_goldens.py", "goldens": []}
    if os.path.exists(index_path):
        with open(index_path) as f:
            index = json.load(f)
    listed = {g["name"] for g in index.get("goldens", [])}
    for g in GOLDENS:
        if g["name"] not in args.only:
            continue
        if g["name"] in listed:
            raise SystemExit(f"[make_goldens] --numpy-reference: {g['name']} already has a transformers golden; refusing to replace it")
        print(f"== {g['name']} (PROVISIONAL numpy reference)", flush=True)
        info = run_golden_numpy(g, args.out)
        print(json.dumps({k: info[k] for k in ("checks", "seconds")}, default=str), flush=True)
        entry = {k: info[k] for k in ("name", "family", "layout", "bits", "group_size", "prompt_len", "vocab_size")} | {"dir": g["name"]}
        index["provisional"] = [e for e in index.get("provisional", []) if e["name"] != g["name"]] + [entry]
    with open(index_path, "w") as f:
        json.dump(index, f, indent=2)
        f.write("\n")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="tests/data/goldens")
    ap.add_argument("--only", action="append", default=[])
    ap.add_argument("--dump-sources", default=None)
    ap.add_argument("--selftest", action="store_true")
    ap.add_argument("--save-configs", default=None, help="write every golden's config as save_pretrained writes it into DIR")
    ap.add_argument("--numpy-reference", action="store_true",
                    help="PROVISIONAL goldens without transformers: the reference from tools/check_goldens.py's numpy "
                    "model; only with --only, only for families in NUMPY_PARAM_SHAPES; listed under the index's "
                    "'provisional', never 'goldens'")
    args = ap.parse_args()
    if args.selftest:
        return selftest()
    if args.numpy_reference:
        return main_numpy_reference(args)
    import torch

    torch.set_num_threads(max(1, min(8, os.cpu_count() or 1)))
    if args.dump_sources:
        try:
            dump_sources(args.dump_sources)
        except Exception:  # noqa: BLE001
            traceback.print_exc()
    versions = versions_info()
    print(json.dumps(versions), flush=True)
    if args.save_configs:
        bad = save_configs(args.save_configs)
        print(f"save_pretrained configs written to {args.save_configs}; failed: {bad}", flush=True)
        if bad:
            return 1
    os.makedirs(args.out, exist_ok=True)
    index, failed = [], []
    # --only regenerates some goldens: the others stay listed in the index as they were.
    index_path = os.path.join(args.out, "index.json")
    if args.only and os.path.exists(index_path):
        with open(index_path) as f:
            index = [g for g in json.load(f)["goldens"] if g["name"] not in args.only]
    for g in GOLDENS:
        if args.only and g["name"] not in args.only:
            continue
        print(f"== {g['name']}", flush=True)
        try:
            info = run_golden(g, args.out, versions)
            print(json.dumps({k: info[k] for k in ("checks", "gdn_path", "seconds")}, default=str)[:3000], flush=True)
            index.append({k: info[k] for k in ("name", "family", "layout", "bits", "group_size", "prompt_len", "vocab_size")} | {"dir": g["name"]})
        except Exception:  # noqa: BLE001
            traceback.print_exc()
            failed.append(g["name"])
    order = [g["name"] for g in GOLDENS]
    index.sort(key=lambda g: order.index(g["name"]) if g["name"] in order else len(order))
    # provisional goldens this run did not replace stay listed as provisional
    provisional = []
    if os.path.exists(index_path):
        with open(index_path) as f:
            made = {g["name"] for g in index}
            provisional = [g for g in json.load(f).get("provisional", []) if g["name"] not in made]
    with open(index_path, "w") as f:
        json.dump({"generator": "tools/make_goldens.py", "versions": versions, "goldens": index, "failed": failed}
                  | ({"provisional": provisional} if provisional else {}), f, indent=2)
        f.write("\n")
    print(f"done: {len(index)} ok, failed: {failed}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
