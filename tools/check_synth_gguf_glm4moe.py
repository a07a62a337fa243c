#!/usr/bin/env python3
"""Cross-check of tools/synth_gguf_glm4moe.py against llama.cpp's own converter.

Runs conversion/glm.py's Glm4MoeModel (through make_gguf_model_fixtures.py's harness: numpy torch shim, no
transformers, set_vocab replaced by a token-less stub) on the glm4_moe golden checkpoint
(tests/data/goldens/glm4_moe_hf_bf16: q/k norms, q/k/v biases, groups, one dense block, an MTP layer) with
--outtype f32, and compares the file it writes with synth_gguf_glm4moe.py's tensor plan and metadata for the
same config.json: tensor names and ggml dims, and every general.* / glm4moe.* key. Expected differences:
general.file_type / name / size_label, the tokenizer keys (the harness writes qwen2 / no special tokens),
and the synth file's blk.N.nextn.embed_tokens / nextn.shared_head_head, which the released GLM-4.5
checkpoints carry in their MTP layer and the golden (written without them) does not.

--routing FILE.gguf instead runs 256 random tokens, one position each, through a synth file's decoder blocks
in numpy and prints, per MoE block, how many experts they chose and the busiest one's share (a 4-block
4.5-Air file: 128 of 128 experts, busiest 1.4-1.6% of picks against 0.8% ideal; ~2.5 min on 2 cores).

Usage: /usr/bin/python3 tools/check_synth_gguf_glm4moe.py [--llama DIR] [--routing FILE.gguf]   (DIR: llama.cpp source with
conversion/ and gguf-py/; default the sluice cache's 80fb11ac checkout). Exit status 1 on an unexpected
difference.
"""
import argparse
import sys

import numpy as np
import tempfile
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import make_gguf_model_fixtures as mf  # noqa: E402

EXTRA_OK = {"nextn.embed_tokens.weight", "nextn.shared_head_head.weight"}
KEYS_OK = {"general.file_type", "general.name", "general.size_label"}


def fields(gguf, path):
    r = gguf.GGUFReader(path)
    kv = {k: f.contents() for k, f in r.fields.items()
          if not k.startswith(("GGUF.", "tokenizer."))}
    return r, kv


def q4_0_rows(raw, ncols):
    """Q4_0 blocks -> f32 rows of ncols (ggml's block_q4_0: fp16 d, 16 bytes of nibbles, low halves first)."""
    b = np.asarray(raw).reshape(-1, 18)
    d = b[:, :2].copy().view(np.float16).astype(np.float32)
    lo = (b[:, 2:] & 15).astype(np.float32) - 8
    hi = (b[:, 2:] >> 4).astype(np.float32) - 8
    return (np.concatenate([lo, hi], 1) * d).reshape(-1, ncols)


def routing(gguf, path, n_tokens=256):
    """Routing spread of a synth glm4moe file: n_tokens random tokens, each run alone (one position, so
    attention is o_proj(v)), through every decoder block in numpy; per MoE block the experts chosen and the
    busiest one's share of the picks (sigmoid router, exp_probs_b for the choice, weights renormalised)."""
    r = gguf.GGUFReader(path)
    T = {t.name: t for t in r.tensors}
    kv = {k: f.contents() for k, f in r.fields.items() if k.startswith("glm4moe.")}
    L = kv["glm4moe.block_count"] - kv.get("glm4moe.nextn_predict_layers", 0)
    H, Hkv = kv["glm4moe.attention.head_count"], kv["glm4moe.attention.head_count_kv"]
    hd, k_used = kv["glm4moe.attention.key_length"], kv["glm4moe.expert_used_count"]
    dense = kv.get("glm4moe.leading_dense_block_count", 0)

    def mat(name):  # [out, in]
        t = T[name]
        if t.tensor_type == gguf.GGMLQuantizationType.Q4_0:
            return q4_0_rows(t.data, int(t.shape[0]))
        return np.asarray(t.data, np.float32).reshape(-1, int(t.shape[0]))

    def vec(name):
        return np.asarray(T[name].data, np.float32).reshape(-1) if name in T else 0.0

    def rms(x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-5) * w

    def silu(x):
        return x / (1 + np.exp(-x))

    emb = T["token_embd.weight"]
    E, V = int(emb.shape[0]), int(emb.shape[1])
    toks = np.random.default_rng(1).integers(0, V, n_tokens)
    x = q4_0_rows(np.asarray(emb.data).reshape(V, -1)[toks], E)
    for il in range(L):
        b = f"blk.{il}."
        h = rms(x, vec(b + "attn_norm.weight"))
        v = h @ mat(b + "attn_v.weight").T + vec(b + "attn_v.bias")
        v = np.repeat(v.reshape(n_tokens, Hkv, hd), H // Hkv, 1).reshape(n_tokens, -1)
        x = x + v @ mat(b + "attn_output.weight").T
        h = rms(x, vec(b + "post_attention_norm.weight"))
        if il < dense:
            act = silu(h @ mat(b + "ffn_gate.weight").T) * (h @ mat(b + "ffn_up.weight").T)
            x = x + act @ mat(b + "ffn_down.weight").T
            print(f"blk {il}: dense", flush=True)
            continue
        p = 1 / (1 + np.exp(-(h @ mat(b + "ffn_gate_inp.weight").T)))
        sel = np.argsort(-(p + vec(b + "exp_probs_b.bias")), 1)[:, :k_used]
        w = np.take_along_axis(p, sel, 1)
        w /= w.sum(1, keepdims=True)
        counts = np.bincount(sel.ravel(), minlength=p.shape[1])
        gate, up, down = (T[b + f"ffn_{n}_exps.weight"] for n in ("gate", "up", "down"))
        ffe = int(gate.shape[1])
        out = np.zeros_like(x)
        for e in np.nonzero(counts)[0]:
            rows, slot = np.nonzero(sel == e)
            G, U = q4_0_rows(np.asarray(gate.data)[e], E), q4_0_rows(np.asarray(up.data)[e], E)
            D = q4_0_rows(np.asarray(down.data)[e], ffe)
            out[rows] += w[rows, slot][:, None] * ((silu(h[rows] @ G.T) * (h[rows] @ U.T)) @ D.T)
        if b + "ffn_gate_shexp.weight" in T:
            act = silu(h @ mat(b + "ffn_gate_shexp.weight").T) * (h @ mat(b + "ffn_up_shexp.weight").T)
            out += act @ mat(b + "ffn_down_shexp.weight").T
        x = x + out
        picks = n_tokens * k_used
        print(f"blk {il}: {np.count_nonzero(counts)} of {p.shape[1]} experts chosen by {n_tokens} tokens x "
              f"top-{k_used}; busiest {counts.max()} of {picks} picks ({counts.max() / picks:.1%}, uniform "
              f"{1 / p.shape[1]:.1%}); residual rms {np.sqrt((x * x).mean()):.2f}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama", type=Path,
                    default=Path("/root/.cache/sluice/llama.cpp-80fb11ac73e66d89eae2c6a91d8a77428fa733ed"))
    ap.add_argument("--routing", metavar="FILE.gguf",
                    help="instead: run 256 random tokens through FILE's decoder blocks and report routing spread")
    args = ap.parse_args()
    gguf, conversion = mf.load_converter(args.llama)
    if args.routing:
        routing(gguf, args.routing)
        return 0
    import synth_gguf_glm4moe as sgl
    src = mf.GOLDENS / "glm4_moe_hf_bf16"
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        st = mf.stage_checkpoint(src.name, src, Path(tmp))
        conv_path = Path(tmp) / "converter.gguf"
        _, cls, model = mf.make_model(gguf, conversion, st.folder, conv_path, False, True)
        mf.write_model(model, cls, conv_path)
        r, conv_kv = fields(gguf, conv_path)
        conv = {t.name: tuple(int(d) for d in t.shape) for t in r.tensors}

        opts = types.SimpleNamespace(rope_theta=None, head_dim=None, attention_bias=None, no_mtp=False,
                                     tiny=False, config=str(src / "config.json"))
        hp = sgl.load_config(src / "config.json", opts)
        V = hp["vocab_size"]
        hp["vocab_size"] = 4096  # room for the dummy vocabulary's byte and control tokens
        mine = {n: tuple(V if d == 4096 else d for d in ne) for n, ne, _ in sgl.tensor_plan(hp, sgl.Q6_K)}
        w = gguf.GGUFWriter(Path(tmp) / "synth.gguf", "glm4moe")
        sgl.write_metadata(w, hp, opts)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.close()
        _, mine_kv = fields(gguf, Path(tmp) / "synth.gguf")

    print(f"converter: {len(conv)} tensors; synth plan: {len(mine)} tensors")
    for n in sorted(set(conv) | set(mine)):
        if n not in mine:
            print(f"  only in the converter's file: {n} {conv[n]}")
            bad += 1
        elif n not in conv:
            ok = any(n.endswith(s) for s in EXTRA_OK)
            print(f"  only in the synth plan: {n} {mine[n]}{'' if ok else '   <-- unexpected'}")
            bad += not ok
        elif conv[n] != mine[n]:
            print(f"  dims differ: {n} converter {conv[n]} synth {mine[n]}")
            bad += 1
    for k in sorted(set(conv_kv) | set(mine_kv)):
        a, b = conv_kv.get(k, "<absent>"), mine_kv.get(k, "<absent>")
        if a != b:
            ok = k in KEYS_OK
            print(f"  key {k}: converter {a!r} synth {b!r}{'' if ok else '   <-- unexpected'}")
            bad += not ok
    print("OK: tensors and glm4moe.* keys agree" if not bad else f"{bad} unexpected differences")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
