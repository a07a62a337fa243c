#!/usr/bin/env python3
"""Full-size random-weight GGUF of llama.cpp's `deepseek2` architecture for a DeepSeek-V3 style
config.json, laid out as llama.cpp's convert_hf_to_gguf.py (conversion/deepseek.py, DeepseekV2Model)
+ `llama-quantize ... Q4_0` would lay it out, so llama.cpp can be measured on the same shapes as
sluice's `sluice synth CONFIG --bits 4`.

It extends the team's ../shared/peer/synth_gguf.py (qwen3moe/qwen3next/qwen35moe only) and reuses its
machinery (imported, not copied): the pre-generated random Q4_0 / Q6_K block pools with signed scales,
the F32 initialisers, the streaming writer loop and the GGUF size bookkeeping. Added here: the
deepseek2 tensor plan and metadata.

Tensor plan (ggml `ne` order, as src/models/deepseek2.cpp load_arch_tensors asks for them):
  token_embd (E, V) Q4_0; output_norm (E) F32; output (E, V) Q6_K
  per layer: attn_norm (E); attn_q_a (E, q_lora) Q4_0; attn_q_a_norm (q_lora); attn_q_b
  (q_lora, H*(nope+rope)) Q4_0; attn_kv_a_mqa (E, kv_lora+rope) Q4_0; attn_kv_a_norm (kv_lora);
  attn_k_b (nope, kv_lora, H) Q4_0 and attn_v_b (kv_lora, v_head, H) Q4_0 -- the converter splits
  kv_b_proj into these two for the absorbed-MLA path (this release loads attn_kv_b only from old
  GGUFs without the *_mla length keys); attn_output (H*v_head, E) Q4_0; ffn_norm (E);
  layers < first_k_dense_replace: dense ffn_gate/ffn_up (E, n_ff), ffn_down (n_ff, E) Q4_0;
  other layers: ffn_gate_inp (E, n_expert) F32 router, exp_probs_b.bias (n_expert) F32 (the
  e_score_correction_bias), ffn_{gate,up}_exps (E, ff_exp, n_expert), ffn_down_exps (ff_exp, E,
  n_expert) Q4_0, shared expert ffn_{gate,up}_shexp (E, ff_exp*n_shared), ffn_down_shexp Q4_0.
  MTP/NextN layers are not written (the converter skips them: skip_mtp).
Types: what llama-quantize Q4_0 leaves (src/llama-quant.cpp tensor_allows_quantization): 1-D tensors,
*_norm.weight and ffn_gate_inp.weight stay F32, output.weight becomes Q6_K, every other weight Q4_0.

Metadata (conversion/deepseek.py + conversion/base.py): head_count_kv = 1 (MLA as MQA),
key_length = kv_lora_rank + qk_rope_head_dim (576 for V3) and value_length = kv_lora_rank (512) --
the absorbed form's cache rows -- plus key_length_mla = nope + rope (192) and value_length_mla =
v_head_dim (128); rope.dimension_count = qk_rope_head_dim; q_lora_rank, kv_lora_rank,
leading_dense_block_count, expert_{count,used_count,shared_count,feed_forward_length,weights_scale,
weights_norm,group_count,group_used_count}, expert_gating_func = sigmoid (DeepSeek-V3's scoring
function; transformers' DeepseekV3Config has no scoring_func field, so it is the default here), and
YaRN keys (rope.scaling.type/factor/original_context_length, yarn_log_multiplier = 0.1*mscale_all_dim)
when the config's rope_scaling / rope_parameters says "yarn" (the team's DeepSeek-V3 config says
"default", so none are written for it). Tokenizer: a dummy gpt2/"deepseek-v3" vocabulary of the
config's size (BOS 0 and EOS 1 as in the config, then the 256 byte tokens, the rest padding).

Random weights: routing of random weights is near-uniform over the experts, as in sluice's synthetic
packs (signed Q4_0 scales; see synth_gguf.py's docstring for why unsigned scales collapse routing).

Usage:
  /usr/bin/python3 tools/synth_gguf_deepseek2.py CONFIG.json OUT.gguf [--tiny] [--dry-run] [--seed N]
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

F32, Q4_0, Q6_K, Q8_0 = sg.F32, sg.Q4_0, sg.Q6_K, sg.Q8_0


def load_config(path, tiny):
    with open(path) as f:
        cfg = json.load(f)
    hp = dict(cfg)
    hp.update(cfg.get("text_config", {}))
    mt = hp.get("model_type", "")
    archs = hp.get("architectures") or [""]
    if mt not in ("deepseek_v3", "deepseek_v2", "kimi_k2") and not str(archs[0]).startswith("Deepseek"):
        raise SystemExit(f"not a DeepSeek-V2/V3 config: model_type {mt!r}")
    rp = dict(hp.get("rope_scaling") or {})
    rp.update(hp.get("rope_parameters") or {})
    if "rope_theta" not in rp and "rope_theta" in hp:
        rp["rope_theta"] = hp["rope_theta"]
    if "type" in rp and "rope_type" not in rp:
        rp["rope_type"] = rp["type"]
    hp["_rope"] = rp
    if hp.get("scoring_func") is None and mt == "deepseek_v3":
        hp["scoring_func"] = "sigmoid"
    if tiny:  # same per-layer shapes, few layers and a small vocabulary: a quick load-and-run check
        hp["num_hidden_layers"] = 2
        hp["first_k_dense_replace"] = min(hp.get("first_k_dense_replace", 0), 1)
        hp["n_routed_experts"] = min(hp["n_routed_experts"], 16)
        hp["num_experts_per_tok"] = min(hp["num_experts_per_tok"], 4)
        hp["n_group"] = hp["topk_group"] = 1
        hp["vocab_size"] = 4096
    return hp


def tensor_plan(hp, output_type):
    E, V, L = hp["hidden_size"], hp["vocab_size"], hp["num_hidden_layers"]
    H = hp["num_attention_heads"]
    ql, kvl = hp.get("q_lora_rank"), hp["kv_lora_rank"]
    nope, rope, vh = hp["qk_nope_head_dim"], hp["qk_rope_head_dim"], hp["v_head_dim"]
    nff, ffe = hp["intermediate_size"], hp["moe_intermediate_size"]
    ne, nsh = hp["n_routed_experts"], hp.get("n_shared_experts", 0)
    kdense = hp.get("first_k_dense_replace", 0)
    plan = [("token_embd.weight", (E, V), Q4_0)]
    for il in range(L):
        b = f"blk.{il}."
        t = plan.append
        t((b + "attn_norm.weight", (E,), F32))
        if ql:
            t((b + "attn_q_a.weight", (E, ql), Q4_0))
            t((b + "attn_q_a_norm.weight", (ql,), F32))
            t((b + "attn_q_b.weight", (ql, H * (nope + rope)), Q4_0))
        else:
            t((b + "attn_q.weight", (E, H * (nope + rope)), Q4_0))
        t((b + "attn_kv_a_mqa.weight", (E, kvl + rope), Q4_0))
        t((b + "attn_kv_a_norm.weight", (kvl,), F32))
        t((b + "attn_k_b.weight", (nope, kvl, H), Q4_0))
        t((b + "attn_v_b.weight", (kvl, vh, H), Q4_0))
        t((b + "attn_output.weight", (H * vh, E), Q4_0))
        t((b + "ffn_norm.weight", (E,), F32))
        if il < kdense:
            t((b + "ffn_gate.weight", (E, nff), Q4_0))
            t((b + "ffn_up.weight", (E, nff), Q4_0))
            t((b + "ffn_down.weight", (nff, E), Q4_0))
        else:
            t((b + "ffn_gate_inp.weight", (E, ne), F32))
            t((b + "exp_probs_b.bias", (ne,), F32))
            t((b + "ffn_gate_exps.weight", (E, ffe, ne), Q4_0))
            t((b + "ffn_up_exps.weight", (E, ffe, ne), Q4_0))
            t((b + "ffn_down_exps.weight", (ffe, E, ne), Q4_0))
            if nsh:
                t((b + "ffn_gate_shexp.weight", (E, ffe * nsh), Q4_0))
                t((b + "ffn_up_shexp.weight", (E, ffe * nsh), Q4_0))
                t((b + "ffn_down_shexp.weight", (ffe * nsh, E), Q4_0))
    plan.append(("output_norm.weight", (E,), F32))
    if not hp.get("tie_word_embeddings", False):
        plan.append(("output.weight", (E, V), output_type))
    return plan


def build_vocab(hp):
    """Dummy vocabulary: BOS/EOS at the config's ids (0 and 1 for DeepSeek-V3), the 256 byte-level
    tokens after them (BPE falls back to bytes), one merge, the rest "[PAD{i}]" as the converter pads."""
    V = hp["vocab_size"]
    T = gguf.TokenType
    def first(x):
        return x[0] if isinstance(x, list) else x
    bos, eos = first(hp.get("bos_token_id", 0)), first(hp.get("eos_token_id", 1))
    specials = {bos: "<｜begin▁of▁sentence｜>", eos: "<｜end▁of▁sentence｜>"}
    byte_toks = sg.bytes_to_unicode() + ["ĠĠ"]
    tokens, types, it = [], [], iter(byte_toks)
    for i in range(V):
        if i in specials:
            tokens.append(specials[i])
            types.append(T.CONTROL)
        else:
            tok = next(it, None)
            tokens.append(tok if tok is not None else f"[PAD{i}]")
            types.append(T.NORMAL if tok is not None else T.UNUSED)
    return tokens, types, ["Ġ Ġ"], bos, eos


def write_metadata(w, hp, args):
    rp = hp["_rope"]
    w.add_name(f"synthetic {os.path.basename(args.config)} (random weights)")
    w.add_type("model")
    w.add_block_count(hp["num_hidden_layers"])
    w.add_context_length(hp.get("max_position_embeddings", 4096))
    w.add_embedding_length(hp["hidden_size"])
    w.add_feed_forward_length(hp["intermediate_size"])
    w.add_head_count(hp["num_attention_heads"])
    w.add_head_count_kv(1)  # MLA converted to MQA with 576-wide keys
    w.add_rope_freq_base(float(rp.get("rope_theta", 10000.0)))
    w.add_layer_norm_rms_eps(float(hp.get("rms_norm_eps", 1e-6)))
    w.add_expert_count(hp["n_routed_experts"])
    w.add_expert_used_count(hp["num_experts_per_tok"])
    if hp.get("n_group") is not None:
        w.add_expert_group_count(hp["n_group"])
    if hp.get("topk_group") is not None:
        w.add_expert_group_used_count(hp["topk_group"])
    sf = hp.get("scoring_func")
    if sf == "sigmoid":
        w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    elif sf == "softmax":
        w.add_expert_gating_func(gguf.ExpertGatingFuncType.SOFTMAX)
    if rp.get("rope_type") == "yarn" and rp.get("factor") is not None:
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(float(rp["factor"]))
        w.add_rope_scaling_orig_ctx_len(int(rp["original_max_position_embeddings"]))
        if rp.get("beta_fast") is not None:
            w.add_rope_scaling_yarn_beta_fast(float(rp["beta_fast"]))
        if rp.get("beta_slow") is not None:
            w.add_rope_scaling_yarn_beta_slow(float(rp["beta_slow"]))
    if rp.get("mscale_all_dim") is not None:
        w.add_rope_scaling_yarn_log_mul(0.1 * float(rp["mscale_all_dim"]))  # the converter's legacy 0.1
    w.add_leading_dense_block_count(hp.get("first_k_dense_replace", 0))
    w.add_vocab_size(hp["vocab_size"])
    if hp.get("q_lora_rank"):
        w.add_q_lora_rank(hp["q_lora_rank"])
    kvl, rope = hp["kv_lora_rank"], hp["qk_rope_head_dim"]
    w.add_kv_lora_rank(kvl)
    w.add_key_length(kvl + rope)
    w.add_value_length(kvl)
    w.add_key_length_mla(hp["qk_nope_head_dim"] + rope)
    w.add_value_length_mla(hp["v_head_dim"])
    w.add_expert_feed_forward_length(hp["moe_intermediate_size"])
    w.add_expert_shared_count(hp.get("n_shared_experts", 0))
    if hp.get("routed_scaling_factor") is not None:
        w.add_expert_weights_scale(float(hp["routed_scaling_factor"]))
    if hp.get("norm_topk_prob"):
        w.add_expert_weights_norm(True)
    w.add_rope_dimension_count(rope)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_0)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    tokens, types, merges, bos, eos = build_vocab(hp)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("deepseek-v3")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(bos)
    w.add_eos_token_id(eos)
    w.add_add_bos_token(True)


def f32_data(rng, name, ne, hp):
    if name.endswith("exp_probs_b.bias"):  # selection-only bias; small so routing stays near-uniform
        return (0.01 * rng.standard_normal(int(np.prod(ne)))).astype(np.float32)
    return sg.f32_data(rng, name, ne, hp)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("config")
    ap.add_argument("out")
    ap.add_argument("--tiny", action="store_true", help="2 layers, small vocab (load check)")
    ap.add_argument("--output-type", default="q6_k", choices=["q6_k", "q4_0", "q8_0"],
                    help="lm_head type (llama-quantize Q4_0 gives q6_k)")
    ap.add_argument("--q4-scale-lo", type=float, default=0.003)
    ap.add_argument("--q4-scale-hi", type=float, default=0.007)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dry-run", action="store_true", help="print the plan, write nothing")
    args = ap.parse_args()

    hp = load_config(args.config, args.tiny)
    otype = {"q6_k": Q6_K, "q4_0": Q4_0, "q8_0": Q8_0}[args.output_type]
    plan = tensor_plan(hp, otype)
    sizes = [sg.nbytes_of(ne, qt) for _, ne, qt in plan]
    total = sum(sizes)
    exp_bytes = sum(s for (n, _, _), s in zip(plan, sizes) if "_exps." in n)
    print(f"deepseek2: {hp['num_hidden_layers']} layers ({hp.get('first_k_dense_replace', 0)} dense), "
          f"{hp['n_routed_experts']} experts (top {hp['num_experts_per_tok']}), vocab {hp['vocab_size']}, "
          f"{len(plan)} tensors, {total / 1e9:.2f} GB ({exp_bytes / 1e9:.2f} GB routed experts)", flush=True)
    if args.dry_run:
        for (n, ne, qt), s in zip(plan, sizes):
            print(f"  {n:40s} {str(ne):24s} {qt.name:5s} {s}")
        return

    rng = np.random.default_rng(args.seed)
    t0 = time.time()
    pools = sg.Pools(rng, args.q4_scale_lo, args.q4_scale_hi)
    write_gguf(args.out, "deepseek2", plan, sizes, pools, lambda w: write_metadata(w, hp, args),
               lambda name, ne: f32_data(rng, name, ne, hp), t0)

if __name__ == "__main__":
    main()
