#!/usr/bin/env python3
"""make_glm4_moe_checkpoints.py — tiny GLM-4.5 MoE checkpoints in Hugging Face layout, made with numpy alone.

Purpose
    The GLM GGUF path (config_gguf.cpp's glm4moe keys, tensor_map_gguf.cpp, weights_gguf.cpp) and sluice's
    GLM math are checked against llama.cpp, an independent implementation, on files made by llama.cpp's own
    converter (tools/make_gguf_weight_fixtures.py, then tools/llama_logits/make_fixture_logits.sh), as the
    Qwen families are. The converter needs a Hugging Face checkpoint; the transformers golden
    (tests/data/goldens/glm4_moe_hf_bf16, tools/make_goldens.py) needs a machine with transformers. This
    script writes the checkpoints the converter reads without one: config.json as transformers 5 writes a
    Glm4MoeConfig, model.safetensors in bf16 (the router's e_score_correction_bias F32, as checkpoints
    store it) with GLM-4.5's tensor names, and a prompt.

How to run (numpy only)
    /usr/bin/python3 tools/make_glm4_moe_checkpoints.py [--check]
    Deterministic: each tensor's values come from a generator seeded by a hash of the checkpoint's and the
    tensor's names, so re-running writes identical bytes (--check regenerates into a temp folder and
    compares). model.safetensors is not committed (git-ignored): scripts/gguf-fixtures.sh, which `make
    test` runs, writes it with this script and checks it against the source_sha256 that
    tests/data/gguf/weights/index.json records for the GGUFs converted from it; config.json and prompt.json
    stay committed (rewritten here with the same bytes).

What it writes (tests/data/gguf/hf/NAME/)
    config.json        Glm4MoeConfig's fields (rope_parameters as transformers 5 nests them)
    model.safetensors  per-expert tensors model.layers.N.mlp.experts.E.{gate,up,down}_proj.weight, the router
                       mlp.gate.weight and mlp.gate.e_score_correction_bias (F32), the ungated shared expert
                       mlp.shared_experts.*, q/k/v biases, q_norm / k_norm where use_qk_norm, dense
                       mlp.{gate,up,down}_proj in the first_k_dense_replace layers, and a stand-in MTP layer
                       model.layers.{num_hidden_layers}.* (eh_proj, enorm, hnorm, shared_head.norm and a full
                       MoE layer), which GLM checkpoints store after the decoder's and nothing here runs
    prompt.json        {"input_ids": [...]}: the prompt llama.cpp's and sluice's logits are taken over — [gMASK]
                       then seeded random ids below vocab_size (the stand-in tokenizer's special ids left out)

    Values (tools/make_goldens.py draw_param's distributions): linear and expert weights N(0, 1/sqrt(fan_in)),
    the embedding N(0, 1), q/k/v biases N(0, 0.5), the router's selection bias N(0, 0.2), RMSNorm weights
    1 + U(-0.4, 0.4); rounded to bf16 (round to nearest even) except the selection bias.

The two checkpoints (close to make_goldens.py's glm4_moe_hf_bf16 and glm4_moe_mlx_q4, bf16, an MTP layer each;
experts 32 wide so that Q8_0 files quantize them, and each file under 1 MB)
    glm4_moe_tiny_hf_bf16      GLM-4.5 style: hidden 64, 4 heads / 2 KV heads of 32 (16 rotary), q/k norms,
                               16 experts of 32 in 4 groups, top-4 from the best 2 groups, routed_scaling_factor
                               2.5, one shared expert, layer 0 dense (96); vocab 256
    glm4_moe_air_tiny_hf_bf16  GLM-4.5-Air style: hidden 96, 4 heads / 1 KV head of 32, no q/k norms, 8 experts
                               of 32, one group, top-2, routed_scaling_factor 1, layer 0 dense (96); vocab 256
"""
import argparse
import filecmp
import hashlib
import json
import struct
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests/data/gguf/hf"
SEED = "sluice-glm4-moe-tiny"
PROMPT_TOKENS = 64
# The stand-in tokenizer's specials (make_gguf_weight_fixtures.py GLM_SPECIALS) take ids 0, 2, 3 and the
# last id below vocab_size; [gMASK] (the last) starts the prompt, the others are left out of it.
GMASK_ID_FROM_END = 1


def glm4_moe_config(h, nh, nkv, hd, inter, moe_i, e, k, groups, topk_groups, scale, v, layers, qk_norm, nextn):
    """Glm4MoeConfig as transformers 5 save_pretrained writes it (keys sorted, rope_parameters nested)."""
    return {
        "architectures": ["Glm4MoeForCausalLM"],
        "attention_bias": True,
        "attention_dropout": 0.0,
        "dtype": "bfloat16",
        "eos_token_id": [2, 3],
        "first_k_dense_replace": 1,
        "head_dim": hd,
        "hidden_act": "silu",
        "hidden_size": h,
        "initializer_range": 0.02,
        "intermediate_size": inter,
        "max_position_embeddings": 4096,
        "model_type": "glm4_moe",
        "moe_intermediate_size": moe_i,
        "n_group": groups,
        "n_routed_experts": e,
        "n_shared_experts": 1,
        "norm_topk_prob": True,
        "num_attention_heads": nh,
        "num_experts_per_tok": k,
        "num_hidden_layers": layers,
        "num_key_value_heads": nkv,
        "num_nextn_predict_layers": nextn,
        "pad_token_id": 0,
        "rms_norm_eps": 1e-05,
        "rope_parameters": {"partial_rotary_factor": 0.5, "rope_theta": 1000000.0, "rope_type": "default"},
        "routed_scaling_factor": scale,
        "tie_word_embeddings": False,
        "topk_group": topk_groups,
        "transformers_version": "5.17.0",
        "use_cache": True,
        "use_qk_norm": qk_norm,
        "vocab_size": v,
    }


CHECKPOINTS = {
    "glm4_moe_tiny_hf_bf16": glm4_moe_config(h=64, nh=4, nkv=2, hd=32, inter=96, moe_i=32, e=16, k=4, groups=4,
                                             topk_groups=2, scale=2.5, v=256, layers=3, qk_norm=True, nextn=1),
    "glm4_moe_air_tiny_hf_bf16": glm4_moe_config(h=96, nh=4, nkv=1, hd=32, inter=96, moe_i=32, e=8, k=2,
                                                 groups=1, topk_groups=1, scale=1.0, v=256, layers=3,
                                                 qk_norm=False, nextn=1),
}


def rng_for(checkpoint, name):
    h = hashlib.sha256(f"{SEED}/{checkpoint}/{name}".encode()).digest()
    return np.random.default_rng(int.from_bytes(h[:8], "little"))


def draw(checkpoint, name, shape):
    r = rng_for(checkpoint, name)
    if name.endswith("e_score_correction_bias"):
        return r.normal(0.0, 0.2, size=shape).astype(np.float32)
    if name.endswith(".bias"):
        return r.normal(0.0, 0.5, size=shape).astype(np.float32)
    if len(shape) == 1:  # RMSNorm weights
        return (1.0 + r.uniform(-0.4, 0.4, size=shape)).astype(np.float32)
    if name.endswith("embed_tokens.weight"):
        return r.normal(0.0, 1.0, size=shape).astype(np.float32)
    return r.normal(0.0, 1.0 / np.sqrt(shape[-1]), size=shape).astype(np.float32)  # [out, in]


def shapes(c):
    """Every tensor's name and shape, in the order the checkpoint lists them."""
    H, V, hd = c["hidden_size"], c["vocab_size"], c["head_dim"]
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    E, I, Id = c["n_routed_experts"], c["moe_intermediate_size"], c["intermediate_size"]
    Is = c["n_shared_experts"] * I
    L = c["num_hidden_layers"]
    out = [("model.embed_tokens.weight", (V, H)), ("model.norm.weight", (H,)), ("lm_head.weight", (V, H))]
    for l in range(L + c["num_nextn_predict_layers"]):
        p = f"model.layers.{l}."
        out += [(p + "input_layernorm.weight", (H,)), (p + "post_attention_layernorm.weight", (H,))]
        a = p + "self_attn."
        out += [(a + "q_proj.weight", (q, H)), (a + "q_proj.bias", (q,)), (a + "k_proj.weight", (kv, H)),
                (a + "k_proj.bias", (kv,)), (a + "v_proj.weight", (kv, H)), (a + "v_proj.bias", (kv,)),
                (a + "o_proj.weight", (H, q))]
        if c["use_qk_norm"]:
            out += [(a + "q_norm.weight", (hd,)), (a + "k_norm.weight", (hd,))]
        m = p + "mlp."
        if l < c["first_k_dense_replace"]:
            out += [(m + "gate_proj.weight", (Id, H)), (m + "up_proj.weight", (Id, H)),
                    (m + "down_proj.weight", (H, Id))]
        else:  # the MTP layer (l == L) is an MoE layer too
            out += [(m + "gate.weight", (E, H)), (m + "gate.e_score_correction_bias", (E,))]
            for e in range(E):
                x = f"{m}experts.{e}."
                out += [(x + "gate_proj.weight", (I, H)), (x + "up_proj.weight", (I, H)),
                        (x + "down_proj.weight", (H, I))]
            s = m + "shared_experts."
            out += [(s + "gate_proj.weight", (Is, H)), (s + "up_proj.weight", (Is, H)),
                    (s + "down_proj.weight", (H, Is))]
        if l >= L:  # DeepSeek-style MTP layer: its own projections and norms
            out += [(p + "eh_proj.weight", (H, 2 * H)), (p + "enorm.weight", (H,)), (p + "hnorm.weight", (H,)),
                    (p + "shared_head.norm.weight", (H,))]
    return out


def bf16_bytes(a):
    """f32 → bf16 by round to nearest even (the values drawn are finite)."""
    u = np.ascontiguousarray(a, dtype="<f4").view("<u4").astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2").tobytes()


def write_safetensors(path, tensors):
    """tensors: [(name, dtype "BF16" | "F32", bytes, shape)], written in name order as safetensors does."""
    header, blobs, offset = {}, [], 0
    for name, dtype, data, shape in sorted(tensors):
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)


def prompt(name, c):
    V = c["vocab_size"]
    gmask = V - GMASK_ID_FROM_END
    specials = {0, 2, 3, gmask}
    r = rng_for(name, "prompt")
    ids = [gmask]
    while len(ids) < PROMPT_TOKENS:
        t = int(r.integers(0, V))
        if t not in specials:
            ids.append(t)
    return ids


def generate(out: Path):
    for name, c in CHECKPOINTS.items():
        d = out / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "config.json").write_text(json.dumps(c, indent=2, sort_keys=True) + "\n")
        tensors = []
        for n, shape in shapes(c):
            a = draw(name, n, shape)
            if n.endswith("e_score_correction_bias"):
                tensors.append((n, "F32", a.astype("<f4").tobytes(), shape))
            else:
                tensors.append((n, "BF16", bf16_bytes(a), shape))
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
