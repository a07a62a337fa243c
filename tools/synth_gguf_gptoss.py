#!/usr/bin/env python3
"""Full-size random-weight GGUF of llama.cpp's `gpt-oss` architecture for a gpt-oss config.json, laid out
as llama.cpp's convert_hf_to_gguf.py (conversion/gpt_oss.py, GptOssModel) writes the Hub's MXFP4
checkpoint with `--outtype q8_0` (the routed experts stay MXFP4: the converter repacks the Hub's blocks
into ggml's block_mxfp4), so llama.cpp can be measured on the same shapes as
`sluice synth CONFIG --bits 8` (MLX affine 8-bit g64 dense, 8.5 bits a weight like Q8_0; ggml MXFP4
experts, the same blocks in both engines).

It extends ../shared/peer/synth_gguf.py and reuses its machinery (imported, not copied): the
pre-generated random block pools, the F32 initialisers, the streaming writer loop. Added here: the
gpt-oss tensor plan and metadata, and a pool of random MXFP4 blocks.

Tensor plan (ggml `ne` order, as src/models/openai-moe.cpp load_arch_tensors asks for them):
  token_embd (E, V) Q8_0; output_norm (E) F32; output (E, V) Q8_0
  per layer: attn_norm (E) F32; post_attention_norm (E) F32; attn_q (E, H*hd) Q8_0 + bias (H*hd);
  attn_k / attn_v (E, Hkv*hd) Q8_0 + bias; attn_output (H*hd, E) Q8_0 + bias (E); attn_sinks (H) F32
  (the converter appends ".weight" to `sinks`); ffn_gate_inp (E, n_expert) F32 + bias (n_expert);
  ffn_gate_exps / ffn_up_exps (E, ff, n_expert) MXFP4 + bias (ff, n_expert); ffn_down_exps
  (ff, E, n_expert) MXFP4 + bias (E, n_expert). All biases F32.
Types: --outtype q8_0 quantizes 2-D weights to Q8_0 and keeps 1-D tensors, biases, norms, sinks and the
router (ffn_gate_inp) F32; the experts are written MXFP4 as they come.

Metadata (conversion/base.py TextModel.set_gguf_parameters + GptOssModel.set_gguf_parameters):
block_count, context_length, embedding_length, feed_forward_length (intermediate_size), head_count,
head_count_kv, rope.freq_base (rope_theta), rope.scaling.{type=yarn, factor, original_context_length,
yarn_beta_fast, yarn_beta_slow} from rope_parameters, attention.layer_norm_rms_epsilon, expert_count,
expert_used_count, attention.key_length / value_length (head_dim), attention.sliding_window, and
expert_feed_forward_length (intermediate_size). llama.cpp's loader takes the sliding-window pattern as
every other layer (swa_period 2, sliding first), as gpt-oss's layer_types say. Tokenizer: a dummy gpt2 /
"gpt-4o" vocabulary of the config's size (the 256 byte tokens, control tokens at o200k_harmony's
<|startoftext|> 199998 and <|return|> 200002 when the vocabulary holds them, the rest padding).

Random weights: MXFP4 blocks with random e2m1 codes (symmetric, so zero-mean) and an e8m0 scale of 2^-7
or 2^-8 (rms ~0.018, as sluice synth draws them); Q8_0 as synth_gguf.py draws it (std ~0.022); biases
and sinks small (N(0, 0.02), sinks N(0, 0.1)). Routing is near-uniform over the experts, as in sluice's
synthetic packs.

Usage:
  /usr/bin/python3 tools/synth_gguf_gptoss.py CONFIG.json OUT.gguf [--tiny] [--dry-run] [--seed N]
Needs numpy and gguf-py ($GGUF_PY or /tmp/llama.cpp/gguf-py) and synth_gguf.py ($SYNTH_GGUF_DIR or
/work/shared/peer).
"""
import argparse
import json
import os
import sys
import time

for p in (os.environ.get("SYNTH_GGUF_DIR"), "/work/shared/peer",
          os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "peer")):
    if p and os.path.isfile(os.path.join(p, "synth_gguf.py")):
        sys.path.insert(0, p)
        break
import numpy as np  # noqa: E402
import synth_gguf as sg  # noqa: E402  (also puts gguf-py on sys.path)
import gguf  # noqa: E402
from synth_gguf_write import write_gguf  # noqa: E402

QT = gguf.GGMLQuantizationType
F32, Q8_0, MXFP4 = QT.F32, QT.Q8_0, QT.MXFP4


def load_config(path, tiny):
    with open(path) as f:
        cfg = json.load(f)
    hp = dict(cfg)
    if hp.get("model_type") != "gpt_oss":
        raise SystemExit(f"not a gpt-oss config: model_type {hp.get('model_type')!r}")
    rp = dict(hp.get("rope_scaling") or {})
    rp.update(hp.get("rope_parameters") or {})
    if "rope_theta" not in rp:
        rp["rope_theta"] = hp.get("rope_theta", 150000.0)
    hp["_rope"] = rp
    hp.setdefault("sliding_window", 128)
    hp.setdefault("head_dim", 64)
    if "num_local_experts" not in hp:
        hp["num_local_experts"] = hp["num_experts"]
    if tiny:  # same per-layer shapes, few layers and a small vocabulary: a quick load-and-run check
        hp["num_hidden_layers"] = 2
        hp["vocab_size"] = 4096
    return hp


def nbytes_of(ne, qt):
    n = int(np.prod(ne))
    if qt == F32:
        return 4 * n
    blk, size = gguf.GGML_QUANT_SIZES[qt]
    assert ne[0] % blk == 0, (ne, qt)
    return n // blk * size


def tensor_plan(hp):
    E, V, L = hp["hidden_size"], hp["vocab_size"], hp["num_hidden_layers"]
    H, Hkv, hd = hp["num_attention_heads"], hp["num_key_value_heads"], hp["head_dim"]
    ff, ne = hp["intermediate_size"], hp["num_local_experts"]
    plan = [("token_embd.weight", (E, V), Q8_0)]
    for il in range(L):
        b = f"blk.{il}."
        t = plan.append
        t((b + "attn_norm.weight", (E,), F32))
        t((b + "attn_q.weight", (E, H * hd), Q8_0))
        t((b + "attn_q.bias", (H * hd,), F32))
        t((b + "attn_k.weight", (E, Hkv * hd), Q8_0))
        t((b + "attn_k.bias", (Hkv * hd,), F32))
        t((b + "attn_v.weight", (E, Hkv * hd), Q8_0))
        t((b + "attn_v.bias", (Hkv * hd,), F32))
        t((b + "attn_output.weight", (H * hd, E), Q8_0))
        t((b + "attn_output.bias", (E,), F32))
        t((b + "attn_sinks.weight", (H,), F32))
        t((b + "post_attention_norm.weight", (E,), F32))
        t((b + "ffn_gate_inp.weight", (E, ne), F32))
        t((b + "ffn_gate_inp.bias", (ne,), F32))
        t((b + "ffn_gate_exps.weight", (E, ff, ne), MXFP4))
        t((b + "ffn_gate_exps.bias", (ff, ne), F32))
        t((b + "ffn_up_exps.weight", (E, ff, ne), MXFP4))
        t((b + "ffn_up_exps.bias", (ff, ne), F32))
        t((b + "ffn_down_exps.weight", (ff, E, ne), MXFP4))
        t((b + "ffn_down_exps.bias", (E, ne), F32))
    plan.append(("output_norm.weight", (E,), F32))
    plan.append(("output.weight", (E, V), Q8_0))
    return plan


def build_vocab(hp):
    V = hp["vocab_size"]
    T = gguf.TokenType
    tokens = sg.bytes_to_unicode() + ["ĠĠ"]
    types = [T.NORMAL] * len(tokens)
    tokens += [f"[PAD{i}]" for i in range(len(tokens), V)]
    types += [T.UNUSED] * (V - len(types))
    bos, eos = (199998, 200002) if V > 200002 else (V - 2, V - 1)
    tokens[bos], types[bos] = "<|startoftext|>", T.CONTROL
    tokens[eos], types[eos] = "<|return|>", T.CONTROL
    return tokens, types, ["Ġ Ġ"], bos, eos


def write_metadata(w, hp, args):
    rp = hp["_rope"]
    w.add_name(f"synthetic {os.path.basename(args.config)} (random weights)")
    w.add_type("model")
    w.add_block_count(hp["num_hidden_layers"])
    w.add_context_length(hp.get("max_position_embeddings", 131072))
    w.add_embedding_length(hp["hidden_size"])
    w.add_feed_forward_length(hp["intermediate_size"])
    w.add_head_count(hp["num_attention_heads"])
    w.add_head_count_kv(hp["num_key_value_heads"])
    if rp.get("rope_type") == "yarn" and rp.get("factor") is not None:
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(float(rp["factor"]))
        w.add_rope_scaling_orig_ctx_len(int(rp["original_max_position_embeddings"]))
        if rp.get("beta_fast") is not None:
            w.add_rope_scaling_yarn_beta_fast(float(rp["beta_fast"]))
        if rp.get("beta_slow") is not None:
            w.add_rope_scaling_yarn_beta_slow(float(rp["beta_slow"]))
    w.add_rope_freq_base(float(rp["rope_theta"]))
    w.add_layer_norm_rms_eps(float(hp.get("rms_norm_eps", 1e-5)))
    w.add_expert_count(hp["num_local_experts"])
    w.add_expert_used_count(hp["num_experts_per_tok"])
    w.add_key_length(hp["head_dim"])
    w.add_value_length(hp["head_dim"])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    w.add_sliding_window(hp["sliding_window"])
    w.add_expert_feed_forward_length(hp["intermediate_size"])
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    tokens, types, merges, bos, eos = build_vocab(hp)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-4o")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(bos)
    w.add_eos_token_id(eos)


def add_mxfp4_pool(pools, rng):
    """Random block_mxfp4: e8m0 scale 119 or 120 (2^-8 / 2^-7 times the e2m1 value), 16 random code bytes."""
    n = 1 << 21  # 2M blocks = 34 MiB
    blk = np.empty((n, 17), np.uint8)
    blk[:, 0] = 119 + rng.integers(0, 2, n, dtype=np.uint8)
    blk[:, 1:] = rng.integers(0, 256, (n, 16), dtype=np.uint8)
    pools.pool[MXFP4] = memoryview(blk.reshape(-1))
    pools.bsz[MXFP4] = 17


def f32_data(rng, name, ne):
    n = int(np.prod(ne))
    if name.endswith("norm.weight"):
        return (1.0 + 0.01 * rng.standard_normal(n)).astype(np.float32)
    if name.endswith("attn_sinks.weight"):
        return (0.1 * rng.standard_normal(n)).astype(np.float32)
    return (0.02 * rng.standard_normal(n)).astype(np.float32)  # router, biases


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("config")
    ap.add_argument("out")
    ap.add_argument("--tiny", action="store_true", help="2 layers, small vocab (load check)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dry-run", action="store_true", help="print the plan, write nothing")
    args = ap.parse_args()

    hp = load_config(args.config, args.tiny)
    plan = tensor_plan(hp)
    sizes = [nbytes_of(ne, qt) for _, ne, qt in plan]
    total = sum(sizes)
    exp_bytes = sum(s for (n, _, _), s in zip(plan, sizes) if "_exps.weight" in n)
    print(f"gpt-oss: {hp['num_hidden_layers']} layers, {hp['num_local_experts']} experts (top "
          f"{hp['num_experts_per_tok']}), vocab {hp['vocab_size']}, {len(plan)} tensors, "
          f"{total / 1e9:.2f} GB ({exp_bytes / 1e9:.2f} GB routed experts)", flush=True)
    if args.dry_run:
        for (n, ne, qt), s in zip(plan, sizes):
            print(f"  {n:40s} {str(ne):24s} {qt.name:5s} {s}")
        return

    rng = np.random.default_rng(args.seed)
    t0 = time.time()
    pools = sg.Pools(rng, 0.003, 0.007)
    add_mxfp4_pool(pools, rng)
    write_gguf(args.out, "gpt-oss", plan, sizes, pools, lambda w: write_metadata(w, hp, args),
               lambda name, ne: f32_data(rng, name, ne), t0)

if __name__ == "__main__":
    main()
