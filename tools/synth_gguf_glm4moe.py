#!/usr/bin/env python3
"""Full-size random-weight GGUF of llama.cpp's `glm4moe` architecture for a GLM-4.5 / 4.6 / 4.5-Air
config.json, laid out as llama.cpp's convert_hf_to_gguf.py (conversion/glm.py, Glm4MoeModel) +
`llama-quantize ... Q4_0` would lay it out, so llama.cpp and sluice (which reads GGUF glm4moe directly)
can be measured on the same file.

It extends the team's ../shared/peer/synth_gguf.py (qwen3moe/qwen3next/qwen35moe only) and reuses its
machinery (imported, not copied): the pre-generated random Q4_0 / Q6_K block pools with signed scales,
the F32 initialisers, the GGUF size bookkeeping and the byte-level token table. Added here: the
glm4moe tensor plan, metadata and GLM's control tokens.

Tensor plan (ggml `ne` order, as src/models/glm4-moe.cpp load_arch_tensors asks for them):
  token_embd (E, V) Q4_0; output_norm (E) F32; output (E, V) Q6_K (absent when tie_word_embeddings)
  per block: attn_norm (E); attn_q (E, H*hd), attn_k / attn_v (E, Hkv*hd) Q4_0, with biases attn_q.bias
  (H*hd), attn_k.bias / attn_v.bias (Hkv*hd) F32 when attention_bias (GLM's o_proj has none);
  attn_output (H*hd, E) Q4_0; attn_q_norm / attn_k_norm (hd) F32 when use_qk_norm (GLM-4.5 355B);
  post_attention_norm (E) (glm4moe lists ATTN_POST_NORM, not FFN_NORM, for post_attention_layernorm);
  blocks < first_k_dense_replace: dense ffn_gate / ffn_up (E, n_ff), ffn_down (n_ff, E) Q4_0;
  other blocks: ffn_gate_inp (E, n_expert) F32 router, exp_probs_b.bias (n_expert) F32 (the
  e_score_correction_bias), ffn_{gate,up}_exps (E, ff_exp, n_expert), ffn_down_exps (ff_exp, E,
  n_expert) Q4_0, shared expert ffn_{gate,up}_shexp (E, ff_exp*n_shared), ffn_down_shexp Q4_0.
  NextN / MTP blocks (num_nextn_predict_layers of them, numbered after the decoder blocks, N = 46 for
  4.5-Air): the converter writes them by default (Glm4MoeModel.supports_mtp_export, no --no-mtp:
  block_count += num_nextn_predict_layers), each a full MoE block as above plus nextn.eh_proj (2E, E)
  Q4_0, nextn.enorm / nextn.hnorm / nextn.shared_head_norm (E) F32, and nextn.embed_tokens /
  nextn.shared_head_head (E, V) Q4_0 (the HF checkpoint's own copies in layer N, as in the released
  GLM-4.5-Air GGUFs; llama.cpp loads those two optional). llama.cpp does not need the MTP block to run
  the trunk (it marks the MTP tensors optional when blk.N.nextn.eh_proj is absent, and skips them unless
  asked to load MTP), sluice leaves them alone; --no-mtp writes the trunk only (no nextn key).
Types: what llama-quantize Q4_0 leaves (src/llama-quant.cpp tensor_allows_quantization and
llama_tensor_get_type_impl): 1-D tensors (norms, biases, exp_probs_b), *_norm.weight and
ffn_gate_inp.weight stay F32; output.weight becomes Q6_K; every other weight, token_embd and the nextn
matrices included (category OTHER), Q4_0. All widths are multiples of 32, so no fallback types.
For GLM-4.5-Air with --attention-bias: 803 tensors, as the released conversions hold; 62.4 GB, of
which 57.3 GB routed experts and 2.0 GB the MTP block (662 tensors without the biases).

Metadata (conversion/base.py TextModel.set_gguf_parameters + Glm4MoeModel.set_gguf_parameters):
block_count (decoder + nextn blocks), context_length, embedding_length, feed_forward_length
(intermediate_size, the dense blocks' width), attention.head_count / head_count_kv, rope.freq_base,
attention.layer_norm_rms_epsilon, expert_count (n_routed_experts), expert_used_count,
expert_group_count / expert_group_used_count (n_group / topk_group), attention.key_length /
value_length (head_dim), rope.dimension_count = int(head_dim * partial_rotary_factor),
expert_feed_forward_length, expert_shared_count, leading_dense_block_count, expert_gating_func =
sigmoid (2), expert_weights_scale (routed_scaling_factor), expert_weights_norm (norm_topk_prob),
nextn_predict_layers; YaRN / linear rope scaling keys only when the config asks for them.
Tokenizer: a dummy gpt2 / "glm4" vocabulary of the config's size: the 256 byte-level tokens, one merge,
GLM's control tokens <|endoftext|> [MASK] [gMASK] [sMASK] <sop> <eop> <|system|> <|user|>
<|assistant|> <|observation|> at their ids 151329..151338 (at V-16.. in a smaller vocabulary), the rest
padding; bos [gMASK], eos / unk / pad <|endoftext|>, eot <|user|>, eom <|observation|>, as
_set_vocab_glm writes them (no add_bos_token key; llama.cpp's glm4 pre-tokenizer adds no BOS).

The team's ../shared/model-configs/glm-4.5-air.json is transformers 5.17's Glm4MoeConfig defaults, which
have no head_dim: hidden / heads = 42 there, an odd rotary width (21) neither engine runs, where the
released GLM-4.5 / 4.6 / 4.5-Air configs all say head_dim 128. Without head_dim in the config this
writer takes 128 (and says so); --head-dim overrides. Those defaults also say attention_bias false and
rope_theta 10000 where the released 4.5-Air says true and 1e6: --attention-bias / --rope-theta make the
file match the release (the bias adds three small F32 tensors a block; rope_theta changes no cost).

Random weights: routing of random weights is near-uniform over the experts, as in sluice's synthetic
packs (signed Q4_0 scales; see synth_gguf.py's docstring for why unsigned scales collapse routing);
exp_probs_b is N(0, 0.01) so the selection bias does not concentrate the choice.

Checked: tools/check_synth_gguf_glm4moe.py compares the plan and metadata with llama.cpp's own
Glm4MoeModel conversion of the glm4_moe golden (tensor names, dims, every glm4moe.* key agree).
sluice runs the files (`sluice info` / `generate` / `bench` / `logits` on the CPU: a --tiny file and a
4-block one; 16 prompt tokens read 234 distinct expert records of 384 picks, near-uniform's ~247).
Written at ~0.4 GB/s on a 2-core dev VM (a 4-block 7 GB file in 17.5 s): ~2.5-3 min for 4.5-Air.

Usage:
  /usr/bin/python3 tools/synth_gguf_glm4moe.py CONFIG.json OUT.gguf [--tiny] [--dry-run] [--seed N]
      [--attention-bias] [--rope-theta 1e6] [--head-dim 128] [--no-mtp]
  GLM-4.5-Air as released: ... ../shared/model-configs/glm-4.5-air.json air.gguf --attention-bias --rope-theta 1e6
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

# GLM-4.5's tokenizer: the added tokens from <|endoftext|> (151329) on, as _set_vocab_glm names them
GLM_SPECIALS = ["<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>",
                "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>"]
GLM_SPECIAL_BASE = 151329


def load_config(path, args):
    with open(path) as f:
        cfg = json.load(f)
    hp = dict(cfg)
    hp.update(cfg.get("text_config", {}))
    mt = hp.get("model_type", "")
    archs = hp.get("architectures") or [""]
    if mt != "glm4_moe" and not str(archs[0]).startswith("Glm4Moe"):
        raise SystemExit(f"not a GLM-4.5 / 4.6 config: model_type {mt!r}")
    rp = dict(hp.get("rope_scaling") or {})
    rp.update(hp.get("rope_parameters") or {})
    if "rope_theta" not in rp and "rope_theta" in hp:
        rp["rope_theta"] = hp["rope_theta"]
    if "partial_rotary_factor" not in rp:
        rp["partial_rotary_factor"] = hp.get("partial_rotary_factor", 0.5)
    if "type" in rp and "rope_type" not in rp:
        rp["rope_type"] = rp["type"]
    if args.rope_theta is not None:
        rp["rope_theta"] = args.rope_theta
    hp["_rope"] = rp
    if args.head_dim is not None:
        hp["head_dim"] = args.head_dim
    elif not hp.get("head_dim"):
        hp["head_dim"] = 128
        print(f"note: {os.path.basename(path)} has no head_dim (hidden/heads = "
              f"{hp['hidden_size'] / hp['num_attention_heads']:.2f}); taking GLM-4.5's 128", flush=True)
    if args.attention_bias is not None:
        hp["attention_bias"] = args.attention_bias
    if args.no_mtp:
        hp["num_nextn_predict_layers"] = 0
    if args.tiny:  # same per-layer shapes, one dense + one MoE block (+ MTP), small vocabulary
        hp["num_hidden_layers"] = 2
        hp["first_k_dense_replace"] = min(hp.get("first_k_dense_replace", 0), 1)
        hp["n_routed_experts"] = min(hp["n_routed_experts"], 16)
        hp["num_experts_per_tok"] = min(hp["num_experts_per_tok"], 4)
        hp["n_group"] = hp["topk_group"] = 1
        hp["vocab_size"] = 4096
        hp["max_position_embeddings"] = 8192
    return hp


def tensor_plan(hp, output_type):
    E, V, L = hp["hidden_size"], hp["vocab_size"], hp["num_hidden_layers"]
    H, Hkv, hd = hp["num_attention_heads"], hp["num_key_value_heads"], hp["head_dim"]
    nff, ffe = hp["intermediate_size"], hp["moe_intermediate_size"]
    ne, nsh = hp["n_routed_experts"], hp.get("n_shared_experts", 0)
    kdense = hp.get("first_k_dense_replace", 0)
    nextn = hp.get("num_nextn_predict_layers", 0) or 0
    bias, qk_norm = hp.get("attention_bias", False), hp.get("use_qk_norm", False)
    plan = [("token_embd.weight", (E, V), Q4_0)]
    for il in range(L + nextn):
        b = f"blk.{il}."
        t = plan.append
        t((b + "attn_norm.weight", (E,), F32))
        t((b + "attn_q.weight", (E, H * hd), Q4_0))
        t((b + "attn_k.weight", (E, Hkv * hd), Q4_0))
        t((b + "attn_v.weight", (E, Hkv * hd), Q4_0))
        if bias:
            t((b + "attn_q.bias", (H * hd,), F32))
            t((b + "attn_k.bias", (Hkv * hd,), F32))
            t((b + "attn_v.bias", (Hkv * hd,), F32))
        t((b + "attn_output.weight", (H * hd, E), Q4_0))
        if qk_norm:
            t((b + "attn_q_norm.weight", (hd,), F32))
            t((b + "attn_k_norm.weight", (hd,), F32))
        t((b + "post_attention_norm.weight", (E,), F32))
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
        if il >= L:  # NextN / MTP block
            t((b + "nextn.eh_proj.weight", (2 * E, E), Q4_0))
            t((b + "nextn.embed_tokens.weight", (E, V), Q4_0))
            t((b + "nextn.enorm.weight", (E,), F32))
            t((b + "nextn.hnorm.weight", (E,), F32))
            t((b + "nextn.shared_head_head.weight", (E, V), Q4_0))
            t((b + "nextn.shared_head_norm.weight", (E,), F32))
    plan.append(("output_norm.weight", (E,), F32))
    if not hp.get("tie_word_embeddings", False):
        plan.append(("output.weight", (E, V), output_type))
    return plan


def build_vocab(hp):
    """Dummy vocabulary: the 256 byte-level tokens (BPE falls back to them), one merge, GLM's control
    tokens at their ids (or at the top of a small vocabulary), the rest "[PAD{i}]" as the converter pads."""
    V = hp["vocab_size"]
    T = gguf.TokenType
    tokens = sg.bytes_to_unicode() + ["ĠĠ"]
    types = [T.NORMAL] * len(tokens)
    tokens += [f"[PAD{i}]" for i in range(len(tokens), V)]
    types += [T.UNUSED] * (V - len(types))
    base = GLM_SPECIAL_BASE if V >= GLM_SPECIAL_BASE + len(GLM_SPECIALS) else V - 16
    assert base > 256, "vocabulary too small for the byte tokens and GLM's control tokens"
    ids = {}
    for i, s in enumerate(GLM_SPECIALS):
        tokens[base + i], types[base + i] = s, T.CONTROL
        ids[s] = base + i
    return tokens, types, ["Ġ Ġ"], ids


def write_metadata(w, hp, args):
    rp = hp["_rope"]
    nextn = hp.get("num_nextn_predict_layers", 0) or 0
    w.add_name(f"synthetic {os.path.basename(args.config)} (random weights)")
    w.add_type("model")
    w.add_block_count(hp["num_hidden_layers"] + nextn)
    w.add_context_length(hp.get("max_position_embeddings", 131072))
    w.add_embedding_length(hp["hidden_size"])
    w.add_feed_forward_length(hp["intermediate_size"])
    w.add_head_count(hp["num_attention_heads"])
    w.add_head_count_kv(hp["num_key_value_heads"])
    rt = rp.get("rope_type")
    if rt == "linear" and rp.get("factor") is not None:
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(float(rp["factor"]))
    elif rt == "yarn" and rp.get("factor") is not None:
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(float(rp["factor"]))
        w.add_rope_scaling_orig_ctx_len(int(rp["original_max_position_embeddings"]))
        if rp.get("beta_fast") is not None:
            w.add_rope_scaling_yarn_beta_fast(float(rp["beta_fast"]))
        if rp.get("beta_slow") is not None:
            w.add_rope_scaling_yarn_beta_slow(float(rp["beta_slow"]))
    w.add_rope_freq_base(float(rp.get("rope_theta", 10000.0)))
    w.add_layer_norm_rms_eps(float(hp.get("rms_norm_eps", 1e-5)))
    w.add_expert_count(hp["n_routed_experts"])
    w.add_expert_used_count(hp["num_experts_per_tok"])
    if hp.get("n_group") is not None:
        w.add_expert_group_count(hp["n_group"])
    if hp.get("topk_group") is not None:
        w.add_expert_group_used_count(hp["topk_group"])
    w.add_key_length(hp["head_dim"])
    w.add_value_length(hp["head_dim"])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_0)
    w.add_rope_dimension_count(int(hp["head_dim"] * rp.get("partial_rotary_factor", 0.5)))
    w.add_expert_feed_forward_length(hp["moe_intermediate_size"])
    if hp.get("n_shared_experts") is not None:
        w.add_expert_shared_count(hp["n_shared_experts"])
    if hp.get("first_k_dense_replace") is not None:
        w.add_leading_dense_block_count(hp["first_k_dense_replace"])
    w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    if hp.get("routed_scaling_factor") is not None:
        w.add_expert_weights_scale(float(hp["routed_scaling_factor"]))
    if hp.get("norm_topk_prob") is not None:
        w.add_expert_weights_norm(bool(hp["norm_topk_prob"]))
    if nextn:
        w.add_nextn_predict_layers(nextn)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    tokens, types, merges, ids = build_vocab(hp)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("glm4")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_eos_token_id(ids["<|endoftext|>"])
    w.add_pad_token_id(ids["<|endoftext|>"])
    w.add_bos_token_id(ids["[gMASK]"])
    w.add_eot_token_id(ids["<|user|>"])
    w.add_unk_token_id(ids["<|endoftext|>"])
    w.add_eom_token_id(ids["<|observation|>"])


def f32_data(rng, name, ne, hp):
    n = int(np.prod(ne))
    if name.endswith("exp_probs_b.bias"):  # selection-only bias; small so routing stays near-uniform
        return (0.01 * rng.standard_normal(n)).astype(np.float32)
    if name.endswith("norm.weight"):  # also nextn.enorm / nextn.hnorm, which sg misses
        return (1.0 + 0.01 * rng.standard_normal(n)).astype(np.float32)
    return sg.f32_data(rng, name, ne, hp)  # router, attention biases: N(0, 0.02)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("config")
    ap.add_argument("out")
    ap.add_argument("--tiny", action="store_true",
                    help="2 blocks (1 dense, 1 MoE) + MTP, 16 experts, 4096 tokens (load check)")
    ap.add_argument("--output-type", default="q6_k", choices=["q6_k", "q4_0", "q8_0"],
                    help="lm_head type (llama-quantize Q4_0 gives q6_k)")
    ap.add_argument("--head-dim", type=int, help="override head_dim (default: the config's, else 128)")
    ap.add_argument("--attention-bias", action=argparse.BooleanOptionalAction, default=None,
                    help="q/k/v biases (default: the config's attention_bias; released GLM-4.5*: true)")
    ap.add_argument("--rope-theta", type=float, help="override rope_theta (released GLM-4.5-Air: 1e6)")
    ap.add_argument("--no-mtp", action="store_true", help="leave out the NextN/MTP blocks (convert --no-mtp)")
    ap.add_argument("--q4-scale-lo", type=float, default=0.003)
    ap.add_argument("--q4-scale-hi", type=float, default=0.007)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dry-run", action="store_true", help="print the plan, write nothing")
    args = ap.parse_args()

    hp = load_config(args.config, args)
    rot = hp["head_dim"] * hp["_rope"].get("partial_rotary_factor", 0.5)
    if rot != int(rot) or int(rot) % 2:
        raise SystemExit(f"rotary width head_dim {hp['head_dim']} x partial_rotary_factor = {rot}: must be an "
                         "even integer (use --head-dim)")
    otype = {"q6_k": Q6_K, "q4_0": Q4_0, "q8_0": Q8_0}[args.output_type]
    plan = tensor_plan(hp, otype)
    sizes = [sg.nbytes_of(ne, qt) for _, ne, qt in plan]
    total = sum(sizes)
    exp_bytes = sum(s for (n, _, _), s in zip(plan, sizes) if "_exps." in n)
    nextn = hp.get("num_nextn_predict_layers", 0) or 0
    mtp_bytes = sum(s for (n, _, _), s in zip(plan, sizes) if n.startswith(f"blk.{hp['num_hidden_layers']}."))
    print(f"glm4moe: {hp['num_hidden_layers']} blocks ({hp.get('first_k_dense_replace', 0)} dense) + {nextn} MTP, "
          f"{hp['n_routed_experts']} experts (top {hp['num_experts_per_tok']}) + {hp.get('n_shared_experts', 0)} "
          f"shared, head_dim {hp['head_dim']}, attention_bias {bool(hp.get('attention_bias'))}, qk_norm "
          f"{bool(hp.get('use_qk_norm'))}, rope_theta {hp['_rope'].get('rope_theta')}, vocab {hp['vocab_size']}, "
          f"{len(plan)} tensors, {total / 1e9:.2f} GB ({exp_bytes / 1e9:.2f} GB routed experts, "
          f"{mtp_bytes / 1e9:.2f} GB MTP block)", flush=True)
    if args.dry_run:
        for (n, ne, qt), s in zip(plan, sizes):
            print(f"  {n:44s} {str(ne):24s} {qt.name:5s} {s}")
        return

    rng = np.random.default_rng(args.seed)
    t0 = time.time()
    pools = sg.Pools(rng, args.q4_scale_lo, args.q4_scale_hi)
    write_gguf(args.out, "glm4moe", plan, sizes, pools, lambda w: write_metadata(w, hp, args),
               lambda name, ne: f32_data(rng, name, ne, hp), t0)

if __name__ == "__main__":
    main()
