#!/usr/bin/env python3
"""make_qwen2_moe_checkpoints.py — a tiny Qwen2-MoE checkpoint in Hugging Face layout, made with numpy alone.

Purpose
    The qwen2moe GGUF path (config_gguf.cpp's qwen2moe keys, tensor_map_gguf.cpp, weights_gguf.cpp) and
    sluice's Qwen2-MoE math (Qwen1.5-MoE-A2.7B / Qwen2-57B-A14B: Qwen2's attention with q/k/v biases and
    no q/k norm, a softmax router not renormalised, a shared expert scaled by σ(shared_expert_gate · x))
    are checked against llama.cpp on files made by llama.cpp's own converter
    (tools/make_gguf_weight_fixtures.py, then tools/llama_logits/make_fixture_logits.sh), as GLM-4.5's are
    (tools/make_glm4_moe_checkpoints.py, whose safetensors writer and bf16 rounding this script reuses).
    This script writes the checkpoint the converter reads without transformers.

How to run (numpy only)
    /usr/bin/python3 tools/make_qwen2_moe_checkpoints.py [--check]
    Deterministic: each tensor's values come from a generator seeded by a hash of the checkpoint's and the
    tensor's names; --check regenerates into a temp folder and compares. As for
    make_glm4_moe_checkpoints.py, model.safetensors is git-ignored and made by scripts/gguf-fixtures.sh
    (checked against index.json's source_sha256); config.json and prompt.json stay committed.

What it writes (tests/data/gguf/hf/qwen2_moe_tiny_hf_bf16/)
    config.json        Qwen2MoeConfig's fields as transformers 5 writes them (rope_parameters nested)
    model.safetensors  bf16: per-expert model.layers.N.mlp.experts.E.{gate,up,down}_proj.weight, the router
                       mlp.gate.weight, the shared expert mlp.shared_expert.* and its gate
                       mlp.shared_expert_gate.weight [1, hidden], q/k/v biases (o_proj has none)
    prompt.json        {"input_ids": [...]}: seeded random ids below vocab_size, the stand-in tokenizer's
                       special ids (bos 1, eos 2, <|im_start|> 255) left out

    Values as make_glm4_moe_checkpoints.py draws them: linear and expert weights N(0, 1/sqrt(fan_in)), the
    embedding N(0, 1), q/k/v biases N(0, 0.5), RMSNorm weights 1 + U(-0.4, 0.4); rounded to bf16.

The checkpoint: hidden 64, 3 layers (every one MoE), 4 heads / 2 KV heads of 16, 8 experts of 32 (so Q8_0
files quantize them), top-2, norm_topk_prob false, a shared expert 96 wide, vocab 256; under 1 MB.
"""
import argparse
import filecmp
import hashlib
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_glm4_moe_checkpoints import bf16_bytes, write_safetensors  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests/data/gguf/hf"
SEED = "sluice-qwen2-moe-tiny"
PROMPT_TOKENS = 64
SPECIAL_IDS = (1, 2, 255)  # make_gguf_weight_fixtures.py design_tokenizer: bos, eos, <|im_start|> (V 256)


def qwen2_moe_config(h, nh, nkv, inter, moe_i, shared_i, e, k, v, layers):
    """Qwen2MoeConfig as transformers 5 save_pretrained writes it (keys sorted, rope_parameters nested)."""
    return {
        "architectures": ["Qwen2MoeForCausalLM"],
        "attention_dropout": 0.0,
        "bos_token_id": 1,
        "decoder_sparse_step": 1,
        "dtype": "bfloat16",
        "eos_token_id": 2,
        "hidden_act": "silu",
        "hidden_size": h,
        "initializer_range": 0.02,
        "intermediate_size": inter,
        "layer_types": ["full_attention"] * layers,
        "max_position_embeddings": 4096,
        "max_window_layers": layers,
        "mlp_only_layers": [],
        "model_type": "qwen2_moe",
        "moe_intermediate_size": moe_i,
        "norm_topk_prob": False,
        "num_attention_heads": nh,
        "num_experts": e,
        "num_experts_per_tok": k,
        "num_hidden_layers": layers,
        "num_key_value_heads": nkv,
        "output_router_logits": False,
        "qkv_bias": True,
        "rms_norm_eps": 1e-06,
        "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"},
        "router_aux_loss_coef": 0.001,
        "shared_expert_intermediate_size": shared_i,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "transformers_version": "5.17.0",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": v,
    }


CHECKPOINTS = {
    "qwen2_moe_tiny_hf_bf16": qwen2_moe_config(h=64, nh=4, nkv=2, inter=128, moe_i=32, shared_i=96, e=8, k=2,
                                               v=256, layers=3),
}


def rng_for(checkpoint, name):
    h = hashlib.sha256(f"{SEED}/{checkpoint}/{name}".encode()).digest()
    return np.random.default_rng(int.from_bytes(h[:8], "little"))


def draw(checkpoint, name, shape):
    r = rng_for(checkpoint, name)
    if name.endswith(".bias"):
        return r.normal(0.0, 0.5, size=shape).astype(np.float32)
    if len(shape) == 1:  # RMSNorm weights
        return (1.0 + r.uniform(-0.4, 0.4, size=shape)).astype(np.float32)
    if name.endswith("embed_tokens.weight"):
        return r.normal(0.0, 1.0, size=shape).astype(np.float32)
    return r.normal(0.0, 1.0 / np.sqrt(shape[-1]), size=shape).astype(np.float32)  # [out, in]


def shapes(c):
    """Every tensor's name and shape."""
    H, V = c["hidden_size"], c["vocab_size"]
    hd = H // c["num_attention_heads"]
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    E, I, Is = c["num_experts"], c["moe_intermediate_size"], c["shared_expert_intermediate_size"]
    out = [("model.embed_tokens.weight", (V, H)), ("model.norm.weight", (H,)), ("lm_head.weight", (V, H))]
    for l in range(c["num_hidden_layers"]):
        p = f"model.layers.{l}."
        out += [(p + "input_layernorm.weight", (H,)), (p + "post_attention_layernorm.weight", (H,))]
        a = p + "self_attn."
        out += [(a + "q_proj.weight", (q, H)), (a + "q_proj.bias", (q,)), (a + "k_proj.weight", (kv, H)),
                (a + "k_proj.bias", (kv,)), (a + "v_proj.weight", (kv, H)), (a + "v_proj.bias", (kv,)),
                (a + "o_proj.weight", (H, q))]
        m = p + "mlp."
        out += [(m + "gate.weight", (E, H))]
        for e in range(E):
            x = f"{m}experts.{e}."
            out += [(x + "gate_proj.weight", (I, H)), (x + "up_proj.weight", (I, H)),
                    (x + "down_proj.weight", (H, I))]
        s = m + "shared_expert."
        out += [(s + "gate_proj.weight", (Is, H)), (s + "up_proj.weight", (Is, H)),
                (s + "down_proj.weight", (H, Is)), (m + "shared_expert_gate.weight", (1, H))]
    return out


def prompt(name, c):
    r = rng_for(name, "prompt")
    ids = []
    while len(ids) < PROMPT_TOKENS:
        t = int(r.integers(0, c["vocab_size"]))
        if t not in SPECIAL_IDS:
            ids.append(t)
    return ids


def generate(out: Path):
    for name, c in CHECKPOINTS.items():
        d = out / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "config.json").write_text(json.dumps(c, indent=2, sort_keys=True) + "\n")
        tensors = [(n, "BF16", bf16_bytes(draw(name, n, shape)), shape) for n, shape in shapes(c)]
        write_safetensors(d / "model.safetensors", tensors)
        (d / "prompt.json").write_text(json.dumps({"input_ids": prompt(name, c)}) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--check", action="store_true", help="regenerate into a temp folder and compare")
    args = ap.parse_args()
    if not args.check:
        generate(Path(args.out))
        return
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        bad = [f"{name}/{f.name}" for name in CHECKPOINTS for f in sorted((Path(tmp) / name).iterdir())
               if not (Path(args.out) / name / f.name).is_file()
               or not filecmp.cmp(f, Path(args.out) / name / f.name, False)]
        print("\n".join(bad) if bad else "checkpoints up to date")
        sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
