#!/usr/bin/env python3
"""make_gguf_weight_fixtures.py — whole GGUF files, tensor data included, written by llama.cpp's own converter.

Purpose
    tools/make_gguf_model_fixtures.py keeps only what the converter writes as metadata and a hash of each
    tensor's f32 values. Loading a GGUF model's weights (F32, F16, Q8_0 and the block formats) needs the
    files themselves, as users have them: this script runs the same converter code (conversion/qwen.py's
    and glm.py's classes and base.py's `prepare_tensors`, `prepare_metadata`, through
    make_gguf_model_fixtures.py's helpers) over the Hugging Face bf16 checkpoints of SOURCES — the goldens,
    GLM-4.5 MoE's tiny checkpoints from tools/make_glm4_moe_checkpoints.py and Qwen2-MoE's from
    tools/make_qwen2_moe_checkpoints.py (tests/data/gguf/hf; no transformers golden yet) — with
    `--outtype f16` and `--outtype q8_0`, and writes the files whole. gpt-oss's two goldens included: the bf16
    one and the Hub-style MXFP4 one (conversion/gpt_oss.py; torch_numpy_shim.py has the uint8 bit operations
    its repack_mxfp4 runs).
    prepare_tensors decides each tensor's type as it does for a user: F32 for 1-D tensors, norms, ssm_a,
    ssm_conv1d, ffn_gate_inp(_shexp), GLM's exp_probs_b; the outtype for the other weights, and F16 where a
    row (ne[0]) is not a multiple of Q8_0's 32-value block (the MoE goldens' ffn_down_exps, 48 wide, and
    ffn_down_shexp, 40 wide; GLM's experts are 32 wide, so Q8_0 there).

    For qwen3_moe_yarn_hf_bf16 it also writes Q4_0, Q5_0 and MXFP4 files, types the converter's --outtype does
    not offer (users make them with llama-quantize, whose per-tensor rules differ: see below). These run
    the converter as `--outtype q8_0` and swap the quantizer: each tensor for which prepare_tensors calls
    `gguf.quants.quantize(data, Q8_0)` — exactly the tensors that get the outtype — is quantized instead
    with `gguf.quants.quantize(data, Q4_0 | Q5_0 | MXFP4)`, gguf-py's own quantizers, from the same f32
    values (the bf16 weights after modify_tensors). Where that raises gguf.QuantError (a row not a multiple
    of 32, the block size of all three), the converter's own except branch falls back to F16, as it does
    for Q8_0. Everything else is the converter's: F32 for the tensors it keeps in F32, token_embd and output
    quantized like the other weights (as the converter quantizes them for q8_0), tensor order, metadata.
    llama-quantize's own rules differ: it gives output.weight Q6_K where its rows allow, and for
    MXFP4_MOE gives MXFP4 to the 3-D expert tensors only and Q8_0 to the other weights; here every weight
    the converter would quantize gets the one type.
    general.file_type is set to the matching LlamaFileType after prepare_tensors (MOSTLY_Q4_0, MOSTLY_Q5_0,
    MOSTLY_MXFP4_MOE — the only file type naming MXFP4), so set_gguf_parameters writes it as for any file.

How to run (numpy, llama.cpp's source; no torch, no transformers)
    /usr/bin/python3 tools/make_gguf_weight_fixtures.py [--llama /tmp/llama.cpp] [--check]
    Same set-up as tools/make_gguf_model_fixtures.py (llama.cpp's source at /tmp/llama.cpp, numpy from
    `apt-get install -y python3-numpy`, tools/torch_numpy_shim.py for torch). The converter runs eagerly
    (main()'s --no-lazy; its default lazy mode runs the same operations, deferred). The one value torch
    would compute differently is ssm_a (−exp(A_log), F32): numpy's exp, within an ulp of torch's.
    Deterministic: re-running writes identical bytes; --check regenerates into a temp folder and compares.
    The GGUFs are not committed (git-ignored): scripts/gguf-fixtures.sh, which `make test` runs, fetches
    llama.cpp's converter source (npm package node-llama-cpp) once, runs this script into a scratch folder
    and checks every file against the committed index.json's SHA-256 before moving it into place. Run
    this script by hand only to change the fixtures: it rewrites index.json, the record the tests and
    scripts/gguf-fixtures.sh go by (then remake llama.cpp's logits, tools/llama_logits).

What it writes (tests/data/gguf/weights/)
    NAME.OUTTYPE.gguf  a complete GGUF file (metadata, tensor infos, tensor data) for the checkpoint NAME:
                       OUTTYPE f16 and q8_0 for every checkpoint in SOURCES, and q4_0, q5_0, mxfp4 for those
                       in EXTRA, with a working tokenizer (below), so llama.cpp loads it. Qwen3-Next / 3.5
                       goldens without an MTP head convert with --no-mtp, as in make_gguf_model_fixtures.py;
                       GLM's stand-in MTP layer (model.layers.3) is converted, as for a released GLM, into
                       block 3 with nextn_predict_layers 1.
    index.json         the converter's version (gguf-py's, and the SHA-256 of the files that decide the
                       output, gguf-py's quants.py and vocab.py among them), then per file: the golden it
                       came from, the outtype, how it was made, general.file_type, the converter class and
                       architecture, the mode, its size and SHA-256, the source (its folder under
                       tests/data, where the prompt the logits are taken over lives) and the SHA-256 of
                       its model.safetensors (source_sha256), the tokenizer (pre,
                       token / byte-token / merge counts, the special tokens' ids, the byte tokens left
                       out) and the ggml type of every tensor (name → type name, in the file's order).

The tokenizer (the goldens ship none; llama.cpp refuses a "gpt2" vocabulary without tokenizer.ggml.merges)
    A GPT-2-style byte-level BPE, written into the staged checkpoint as tokenizer.json (Qwen's layout: NFC,
    the Split regex of tokenizer.ggml.pre, ByteLevel, BPE model, added tokens normalized=false special=true)
    and tokenizer_config.json (Qwen2.5/3's: bos_token null, eos_token the config's eos, pad <|endoftext|>).
    The converter's own set_vocab then writes the GGUF's vocabulary (use_converter_vocab): _set_vocab_gpt2,
    get_vocab_base (over StandInTokenizer, for transformers' AutoTokenizer) and SpecialVocab (merges from
    tokenizer.json; bos from config.json, eos and pad from tokenizer_config.json). Besides AutoTokenizer, an
    empty `sentencepiece` module stands in (Qwen2Model.set_vocab imports it before looking for
    tokenizer.model), and get_vocab_base_pre is replaced: it names the pre-tokenizer from a hash of the ids
    the real Qwen tokenizers give a test string; it returns "qwen2" ("qwen35" for Qwen3.5, "glm4" for GLM-4.5),
    as for those.
    Id layout (design_tokenizer), config.json (text_config merged) vocab_size V, bos_token_id, eos_token_id:
      bos → "<|endoftext|>", eos → "<|im_end|>" (Qwen instruct's pair; "<|endoftext|>" when one id), CONTROL;
      the remaining of "<|endoftext|>", "<|im_start|>", "<|im_end|>" at the last ids below V, CONTROL;
      every other id, in order: the 256 byte tokens in bytes_to_unicode order, then the merges' results,
      NORMAL. The merges: BPE trained on Fry's 100 most common English words (" the", " of", ...),
      weighted 1000 // rank, until V is full ("Ġ t", "h e", "Ġt he", "Ġ a", ...). Where the 256 bytes leave
      fewer than MIN_MERGES (10) ids — the V = 256 goldens (qwen2, qwen3, qwen3_moe) — the byte tokens that
      never occur in UTF-8 text (0xC0, 0xC1, 0xF5..0xFF, all 13 there) are left out to make room: gguf-py
      writes no merges key for an empty list. All goldens have bos 1, eos 2:
        V 256 (qwen2, qwen3, qwen3_moe): 1 <|endoftext|>, 2 <|im_end|>, 255 <|im_start|>; bytes at 0, 3..244
                 (243: 13 left out); 10 merges' results at 245..254
        V 300 (qwen3_next):             1, 2, 299 (<|im_start|>); bytes at 0, 3..257; 41 merges at 258..298
        V 320 (qwen3_5_moe):            1, 2, 319 (<|im_start|>); bytes at 0, 3..257; 61 merges at 258..318
    GLM (pre "glm4"): tokenizer.json as above with the glm4 Split regex and no normalizer, tokenizer_config.json
    GLM-4.5's (eos and pad <|endoftext|>, no BOS), and the four specials base.py's _set_vocab_glm looks up
    (bos [gMASK], eot <|user|>, unk <|endoftext|>, eom <|observation|>) placed by glm_special_ids: pad_token_id
    0 <|endoftext|>, eos_token_id [2, 3] <|user|> and <|observation|>, [gMASK] at 255; 243 bytes (13 left out)
    and 9 merges fill V 256. The converter's own _set_vocab_glm writes them (Glm4MoeModel.set_vocab).
    gpt-oss (pre "gpt-4o", GptOssModel.set_vocab = _set_vocab_gpt2): tokenizer.json with the o200k Split regex,
    no normalizer and ignore_merges (gpt-oss's), tokenizer_config.json gpt-oss's (eos <|return|>, pad
    <|endoftext|>; its BOS <|startoftext|> left out, config.json's bos_token_id being null); pad_token_id 1
    <|endoftext|>, eos_token_id 2 <|return|>, the six other harmony tokens (<|start|>, <|channel|>,
    <|message|>, <|end|>, <|constrain|>, <|call|>) at 250..255; 243 bytes (13 left out) and 5 merges fill V 256.
    For the MXFP4 golden (gpt_oss_hf_mxfp4) the converter repacks the Hub's blocks itself (repack_mxfp4): its
    expert tensors are MXFP4 whatever the outtype, the outtype the rest.
    generate() checks each file's vocabulary read back (check_tokenizer): every merge's parts and result
    are NORMAL tokens, the specials CONTROL, bos/eos/pad ids on specials, the texts unique.
"""
import argparse
import hashlib
import json
import os
import re
import sys
import tempfile
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_gguf_model_fixtures as mf  # noqa: E402

ROOT = mf.ROOT
# Qwen3-MoE from its YaRN golden: norm_topk_prob true there, as in every Qwen3-MoE release and as llama.cpp's
# qwen3moe graph always computes (the converter writes no key for it), so the file runs what transformers ran.
GOLDENS = [
    "qwen2_hf_bf16", "qwen3_hf_bf16", "qwen3_moe_yarn_hf_bf16", "qwen3_next_hf_bf16", "qwen3_5_moe_hf_bf16",
    "glm4_moe_hf_bf16", "gpt_oss_hf_bf16", "gpt_oss_hf_mxfp4", "mixtral_hf_bf16",
]
# The checkpoints converted, as folders under tests/data: the goldens' (GgufGolden checks their F16 files
# against transformers), and the tiny GLM-4.5 MoE ones of tools/make_glm4_moe_checkpoints.py and Qwen2-MoE
# one of tools/make_qwen2_moe_checkpoints.py (gguf_glm_test / gguf_qwen2_moe_test are written against them;
# the qwen2_moe golden has a dense layer, mlp_only_layers, which llama.cpp's qwen2moe cannot hold).
SOURCES = [f"goldens/{g}" for g in GOLDENS] + [
    "gguf/hf/glm4_moe_tiny_hf_bf16", "gguf/hf/glm4_moe_air_tiny_hf_bf16", "gguf/hf/qwen2_moe_tiny_hf_bf16"
]
OUTTYPES = ["f16", "q8_0"]  # the converter's own --outtype path
EXTRA = {"qwen3_moe_yarn_hf_bf16": ["q4_0", "q5_0", "mxfp4"]}  # converter f32 tensors + gguf.quants.quantize
CONVERTER_FILES = ("conversion/qwen.py", "conversion/glm.py", "conversion/gpt_oss.py", "conversion/llama.py",
                   "conversion/base.py",
                   "gguf-py/gguf/tensor_mapping.py", "gguf-py/gguf/quants.py", "gguf-py/gguf/vocab.py")


# ---------------------------------------------------------------------------------------------------------
# The tokenizer: a small GPT-2-style byte-level BPE, written into the staged checkpoint as tokenizer.json +
# tokenizer_config.json (the files a Qwen checkpoint ships), and read by the converter's own code.

SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")  # Qwen's three, in Qwen's id order
# GLM-4.5's: the four base.py _set_vocab_glm looks up (bos [gMASK], eot <|user|>, unk <|endoftext|>, eom
# <|observation|>), in GLM's id order (151329, 151331, 151336, 151338).
GLM_SPECIALS = ("<|endoftext|>", "[gMASK]", "<|user|>", "<|observation|>")
# The bytes that never occur in UTF-8 text (0xC0, 0xC1 would start overlong forms, 0xF5..0xFF code points
# past U+10FFFF): the only byte tokens a vocabulary can go without when the 256 do not fit (the 256-entry
# goldens), left out from the end of this list.
# gpt-oss's (o200k_harmony): pad <|endoftext|>, eos <|return|> (its tokenizer_config.json), and the rest of the
# harmony format's markup — all of it, so the engine reads the vocabulary as harmony's (the markup sampled,
# <|return|> and <|call|> ending a reply) as it does gpt-oss's own.
GPT_OSS_SPECIALS = ("<|endoftext|>", "<|return|>", "<|start|>", "<|channel|>", "<|message|>", "<|end|>",
                    "<|constrain|>", "<|call|>")
NON_UTF8_BYTES = (0xC0, 0xC1) + tuple(range(0xF5, 0x100))
MIN_MERGES = 10  # gguf-py writes no tokenizer.ggml.merges for an empty list (GGUFWriter.add_array skips it)
# The merges: BPE trained on the 100 most common English words (Fry's list, in rank order), each a
# word after a space ("Ġthe"), weighted 1000 // rank; ties go to the smallest pair (a, b).
ENGLISH = ("the of and to a in is you that it he was for on are as with his they I at be this have from or "
           "one had by word but not what all were we when your can said there use an each which she do how "
           "their if will up other about out many then them these so some her would make like him into time "
           "has look two more write go see number no way could people my than first water been call who oil "
           "its now find long down day did get come made may part").split()
# tokenizer.json's Split regexes (Qwen2/2.5/3/3-Next and Qwen3.5/3.6: sluice's kQwen2SplitRegex,
# kQwen35SplitRegex), written as the released checkpoints have them.
SPLIT_REGEX = {
    "qwen2": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "qwen35": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    "glm4": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    # gpt-oss's tokenizer.json (o200k; llama.cpp's pre "gpt-4o")
    "gpt-4o": r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
}
# The stand-in's pre-tokenizer: the same regex in Python's `re` (\p{L} as [^\W\d_], \p{N} as \d, no \p{M});
# the converter only encodes the added tokens' own text with it.
SPLIT_RE = re.compile(r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|(?:[^\r\n\w]|_)?[^\W\d_]+|\d| ?(?:[^\s\w]|_)+[\r\n]*|"
                      r"\s*[\r\n]+|\s+(?!\S)|\s+")


def train_merges(byte_enc, n_tokens):
    """Merges until `n_tokens` new tokens exist (a merge whose result is already a token adds none)."""
    words = {tuple(byte_enc[b] for b in (" " + w).encode()): 1000 // (rank + 1) for rank, w in enumerate(ENGLISH)}
    merges, new = [], []
    while len(new) < n_tokens:
        counts = {}
        for w, c in words.items():
            for pair in zip(w, w[1:]):
                counts[pair] = counts.get(pair, 0) + c
        assert counts, "the merge corpus ran out of pairs"
        a, b = min(counts, key=lambda p: (-counts[p], p))
        merges.append((a, b))
        if a + b not in new:
            new.append(a + b)
        merged = {}
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == (a, b):
                    out.append(a + b)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            merged[tuple(out)] = merged.get(tuple(out), 0) + c
        words = merged
    return merges, new


def design_tokenizer(gguf, text, pre):
    """The id layout for a model config `text` (config.json with text_config merged, as the converter reads
    it): config.json's bos_token_id and eos_token_id are special tokens — bos "<|endoftext|>", eos
    "<|im_end|>" (both "<|endoftext|>" where they are one id), as in Qwen's instruct checkpoints — the other
    specials take the last ids below vocab_size, and the byte tokens (bytes_to_unicode order) then the
    merges' results fill the remaining ids in order. GLM (pre "glm4"): glm_special_ids places the specials,
    and tokenizer_config.json is GLM-4.5's."""
    n_vocab, bos, eos = text["vocab_size"], text.get("bos_token_id"), text.get("eos_token_id")
    special = {}
    if pre == "glm4":
        special = glm_special_ids(text)
    elif pre == "gpt-4o":  # gpt-oss: pad_token_id <|endoftext|>, eos_token_id <|return|>, no BOS
        special = {text["pad_token_id"]: "<|endoftext|>", eos: "<|return|>"}
    else:
        if bos is not None:
            special[bos] = "<|endoftext|>"
        if eos is not None and eos not in special:
            special[eos] = "<|im_end|>" if bos is not None else "<|endoftext|>"
    assert all(isinstance(i, int) and 0 <= i < n_vocab for i in special), (bos, eos, n_vocab)
    specials = {"glm4": GLM_SPECIALS, "gpt-4o": GPT_OSS_SPECIALS}.get(pre, SPECIALS)
    rest = [t for t in specials if t not in special.values()]
    free = [i for i in range(n_vocab) if i not in special]
    special.update(zip(free[len(free) - len(rest):], rest))
    byte_enc = gguf.vocab.bytes_to_unicode()
    room = n_vocab - len(special) - 256
    n_out = min(len(NON_UTF8_BYTES), max(0, MIN_MERGES - room))  # GLM's 4 specials in 256 ids: 9 merges
    left_out = NON_UTF8_BYTES[len(NON_UTF8_BYTES) - n_out:] if n_out else ()
    assert room + n_out >= 1, (n_vocab, "no room for the byte tokens and a merge")
    byte_tokens = [c for b, c in byte_enc.items() if b not in left_out]
    merges, merged = train_merges(byte_enc, n_vocab - len(special) - len(byte_tokens))
    ids = iter(i for i in range(n_vocab) if i not in special)
    vocab = {t: next(ids) for t in byte_tokens + merged}
    added = [{"id": i, "content": special[i], "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i in sorted(special)]
    level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": None if pre == "gpt-4o" else {"type": "NFC"},  # gpt-oss's has none
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": SPLIT_REGEX[pre]}, "behavior": "Isolated", "invert": False},
            level]},
        "post_processor": level, "decoder": level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": pre == "gpt-4o",  # gpt-oss's tokenizer.json: true
                  "vocab": vocab, "merges": [f"{a} {b}" for a, b in merges]},
    }
    summary = {"tokens": n_vocab, "byte_tokens": len(byte_tokens), "merges": len(merges),
               "special": {str(i): special[i] for i in sorted(special)},
               "bytes_left_out": [f"0x{b:02X}" for b in left_out]}
    if pre == "glm4":
        tokenizer["normalizer"] = None  # GLM-4.5's tokenizer.json has none
        config = {  # as GLM-4.5's tokenizer_config.json: no BOS, eos and pad <|endoftext|>
            "added_tokens_decoder": {str(a["id"]): {k: v for k, v in a.items() if k != "id"} for a in added},
            "additional_special_tokens": [t for t in GLM_SPECIALS if t != "<|endoftext|>"],
            "clean_up_tokenization_spaces": False,
            "do_lower_case": False,
            "eos_token": "<|endoftext|>",
            "extra_special_tokens": {},
            "model_max_length": 128000,
            "pad_token": "<|endoftext|>",
            "padding_side": "left",
            "remove_space": False,
            "tokenizer_class": "PreTrainedTokenizerFast",
        }
        return tokenizer, config, summary
    if pre == "gpt-4o":
        config = {  # as gpt-oss's tokenizer_config.json, but for its BOS (<|startoftext|>: not in this vocabulary)
            "added_tokens_decoder": {str(a["id"]): {k: v for k, v in a.items() if k != "id"} for a in added},
            "clean_up_tokenization_spaces": False,
            "eos_token": "<|return|>",
            "extra_special_tokens": {},
            "model_input_names": ["input_ids", "attention_mask"],
            "model_max_length": 1000000000000000019884624838656,
            "pad_token": "<|endoftext|>",
            "tokenizer_class": "PreTrainedTokenizerFast",
        }
        return tokenizer, config, summary
    config = {  # as Qwen2.5/3's tokenizer_config.json: no BOS, eos_token the config's eos, pad <|endoftext|>
        "add_prefix_space": False,
        "added_tokens_decoder": {str(a["id"]): {k: v for k, v in a.items() if k != "id"} for a in added},
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "bos_token": None,
        "clean_up_tokenization_spaces": False,
        "eos_token": special[eos] if eos is not None else "<|endoftext|>",
        "errors": "replace",
        "model_max_length": 32768,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }
    return tokenizer, config, summary


# Mixtral's SentencePiece vocabulary (pre "llama-spm" here; the file says model "llama", pre "default"): the
# pieces after the specials and the byte tokens, in id order — merged pieces first, then the characters they
# are made of, as SentencePiece orders a BPE model (Llama-2 / Mixtral: "▁t" at 260ish, single characters
# from 29871) — with SentencePiece's BPE scores, -(position among them).
SPM_PIECES = ("▁t", "he", "▁th", "▁the", "▁a", "▁", "e", "t", "a", "h")


def design_spm_tokenizer(text):
    """Mixtral's layout in `text`'s vocab_size (256 for the golden): <unk> 0, <s> 1, </s> 2 (config.json's bos 1
    and eos 2), the byte tokens <0x00>.. <0xFF> from 3 — without the 13 that never occur in UTF-8 text, which
    256 ids cannot hold beside the specials and a few pieces — then SPM_PIECES. Returns (the sentencepiece
    model as JSON, the stand-in SentencePieceProcessor's input; tokenizer_config.json, Mixtral's; summary)."""
    n_vocab = text["vocab_size"]
    assert (text.get("bos_token_id"), text.get("eos_token_id")) == (1, 2), "Mixtral's bos 1, eos 2"
    pieces = [("<unk>", 0.0, "unknown"), ("<s>", 0.0, "control"), ("</s>", 0.0, "control")]
    byte_ids = [b for b in range(256) if b not in NON_UTF8_BYTES]
    pieces += [(f"<0x{b:02X}>", 0.0, "byte") for b in byte_ids]
    room = n_vocab - len(pieces)
    assert room == len(SPM_PIECES), (n_vocab, room)
    pieces += [(p, -float(i), "normal") for i, p in enumerate(SPM_PIECES)]
    config = {  # Mixtral-8x7B-Instruct-v0.1's tokenizer_config.json (its chat template left out)
        "add_bos_token": True,
        "add_eos_token": False,
        "added_tokens_decoder": {str(i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                                          "single_word": False, "special": True}
                                 for i, (t, _, _) in enumerate(pieces[:3])},
        "additional_special_tokens": [],
        "bos_token": "<s>",
        "clean_up_tokenization_spaces": False,
        "eos_token": "</s>",
        "legacy": True,
        "model_max_length": 1000000000000000019884624838656,
        "pad_token": None,
        "sp_model_kwargs": {},
        "spaces_between_special_tokens": False,
        "tokenizer_class": "LlamaTokenizer",
        "unk_token": "<unk>",
        "use_default_system_prompt": False,
    }
    summary = {"tokens": n_vocab, "byte_tokens": len(byte_ids), "pieces": list(SPM_PIECES),
               "special": {"0": "<unk>", "1": "<s>", "2": "</s>"},
               "bytes_left_out": [f"0x{b:02X}" for b in NON_UTF8_BYTES]}
    return {"pieces": pieces}, config, summary


class StandInSentencePiece:
    """What _create_vocab_sentencepiece asks of sentencepiece.SentencePieceProcessor, read from the staged
    tokenizer.model — here design_spm_tokenizer's JSON, not SentencePiece's protobuf, which needs the library:
    LoadFromFile, vocab_size, IdToPiece, GetScore and the piece types."""

    def LoadFromFile(self, path):  # noqa: N802 (sentencepiece's names)
        self.pieces = json.loads(Path(path).read_text())["pieces"]

    def vocab_size(self):
        return len(self.pieces)

    def IdToPiece(self, i):  # noqa: N802
        return self.pieces[i][0]

    def GetScore(self, i):  # noqa: N802
        return self.pieces[i][1]

    def IsUnknown(self, i):  # noqa: N802
        return self.pieces[i][2] == "unknown"

    def IsControl(self, i):  # noqa: N802
        return self.pieces[i][2] == "control"

    def IsUnused(self, i):  # noqa: N802
        return self.pieces[i][2] == "unused"

    def IsByte(self, i):  # noqa: N802
        return self.pieces[i][2] == "byte"


def glm_special_ids(text):
    """GLM-4.5's specials placed by config.json's ids, as in the released checkpoints (pad 151329
    <|endoftext|>; eos [151329, 151336, 151338]: <|endoftext|>, <|user|>, <|observation|>): pad_token_id
    <|endoftext|>, the eos ids in order the ones of those three still unplaced, bos_token_id (GLM has none)
    [gMASK]; design_tokenizer puts the rest at the last ids."""
    special = {}
    pad, eos, bos = text.get("pad_token_id"), text.get("eos_token_id"), text.get("bos_token_id")
    if isinstance(pad, int):
        special[pad] = "<|endoftext|>"
    eos_texts = [t for t in ("<|endoftext|>", "<|user|>", "<|observation|>") if t not in special.values()]
    for i in ([eos] if isinstance(eos, int) else eos or []):
        if i not in special and eos_texts:
            special[i] = eos_texts.pop(0)
    if isinstance(bos, int) and bos not in special:
        special[bos] = "[gMASK]"
    return special


def write_tokenizer(gguf, st, pre):
    """tokenizer.json and tokenizer_config.json into the staged folder (Mixtral: tokenizer.model, for
    StandInSentencePiece); returns design_tokenizer's summary."""
    if pre == "llama-spm":
        model, config, summary = design_spm_tokenizer(st.text)
        (st.folder / "tokenizer.model").write_text(json.dumps(model, ensure_ascii=False))
        (st.folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False))
        return summary
    tokenizer, config, summary = design_tokenizer(gguf, st.text, pre)
    (st.folder / "tokenizer.json").write_text(json.dumps(tokenizer, indent=2, ensure_ascii=False))
    (st.folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False))
    return summary


class StandInTokenizer:
    """What get_vocab_base asks of transformers' AutoTokenizer.from_pretrained(dir_model) (a
    PreTrainedTokenizerFast), read from the folder's tokenizer.json: vocab (the BPE vocab and the added
    tokens), get_added_vocab(), added_tokens_decoder, and encode/decode (run on each added token that is
    not `normalized`: split on the added tokens, then byte-level BPE over each pre-token)."""

    def __init__(self, folder):
        tj = json.loads((Path(folder) / "tokenizer.json").read_text())
        model = tj["model"]
        self.ranks = {tuple(m.split(" ")): r for r, m in enumerate(model["merges"])}
        self.added_tokens_decoder = {a["id"]: types.SimpleNamespace(**{k: v for k, v in a.items() if k != "id"})
                                     for a in tj["added_tokens"]}
        self.added = {a.content: i for i, a in self.added_tokens_decoder.items()}
        self.vocab = {**model["vocab"], **self.added}
        self.id_to_token = {i: t for t, i in self.vocab.items()}

    @classmethod
    def from_pretrained(cls, folder, **kwargs):
        return cls(folder)

    def get_added_vocab(self):
        return dict(self.added)

    def _bpe(self, word):
        parts = list(word)
        while len(parts) > 1:
            rank, i = min((self.ranks.get(p, len(self.ranks)), i) for i, p in enumerate(zip(parts, parts[1:])))
            if rank == len(self.ranks):
                break
            parts[i:i + 2] = [parts[i] + parts[i + 1]]
        return [self.vocab[p] for p in parts]

    def encode(self, text, add_special_tokens=True):  # the post-processor (ByteLevel) adds no tokens
        byte_enc = self.byte_enc
        specials = sorted(self.added, key=len, reverse=True)
        ids = []
        for piece in re.split("(" + "|".join(map(re.escape, specials)) + ")", text):
            if piece in self.added:
                ids.append(self.added[piece])
            else:
                for w in SPLIT_RE.findall(piece):
                    ids += self._bpe("".join(byte_enc[b] for b in w.encode()))
        return ids

    def decode(self, ids, **kwargs):
        byte_dec = {c: b for b, c in self.byte_enc.items()}
        out, run = [], bytearray()
        for i in ids:
            t = self.id_to_token[i]
            if i in self.added_tokens_decoder:
                out += [run.decode(errors="replace"), t]
                run = bytearray()
            else:
                run += bytes(byte_dec[c] for c in t)
        return "".join(out) + run.decode(errors="replace")


def use_converter_vocab(gguf, model, pre):
    """Puts the converter's own set_vocab back in place of make_gguf_model_fixtures.py's "[PAD{i}]" one: the
    class's set_vocab (Qwen2Model / Qwen3Model: _set_vocab_sentencepiece, then, on FileNotFoundError for
    tokenizer.model, _set_vocab_gpt2; the MoE / Next / 3.5 classes: TextModel's _set_vocab_gpt2), which runs
    get_vocab_base over StandInTokenizer and gguf-py's SpecialVocab over the staged tokenizer.json /
    tokenizer_config.json / config.json (merges, bos/eos/pad ids). Three things stand in, only while it runs:
    transformers.AutoTokenizer (StandInTokenizer); a `sentencepiece` module (installed for users: the
    converter imports it before it looks for tokenizer.model); and get_vocab_base_pre, which names the
    pre-tokenizer by hashing the token ids of a test string — ids of the real Qwen tokenizers, which no
    tiny vocabulary reproduces — so it returns what it gives for them, "qwen2" ("qwen35" for Qwen3.5, "glm4"
    for GLM-4.5, whose class's set_vocab is _set_vocab_glm)."""
    cls_set_vocab = type(model).set_vocab
    StandInTokenizer.byte_enc = gguf.vocab.bytes_to_unicode()

    def set_vocab():
        transformers = sys.modules["transformers"]  # torch_numpy_shim's, with an AutoConfig that fails
        sp = types.ModuleType("sentencepiece")
        sp.SentencePieceProcessor = StandInSentencePiece if pre == "llama-spm" else None
        assert "sentencepiece" not in sys.modules and not hasattr(transformers, "AutoTokenizer")
        sys.modules["sentencepiece"] = sp
        transformers.AutoTokenizer = StandInTokenizer
        try:
            cls_set_vocab(model)
        finally:
            del sys.modules["sentencepiece"]
            del transformers.AutoTokenizer

    model.set_vocab = set_vocab
    model.get_vocab_base_pre = lambda tokenizer: pre


def check_spm_tokenizer(gguf, reader, summary):
    """A "llama" vocabulary as LlamaModel.set_vocab wrote it: the pieces in order with their types (the three
    specials CONTROL: tokenizer_config.json's added_tokens_decoder flags them special), no merges, bos 1,
    eos 2, add_bos_token true."""
    f = reader.fields
    T = gguf.TokenType
    tokens = f["tokenizer.ggml.tokens"].contents()
    ttypes = f["tokenizer.ggml.token_type"].contents()
    assert f["tokenizer.ggml.model"].contents() == "llama" and f["tokenizer.ggml.pre"].contents() == "default"
    assert len(tokens) == len(ttypes) == len(f["tokenizer.ggml.scores"].contents()) == summary["tokens"]
    assert "tokenizer.ggml.merges" not in f
    assert tokens[:3] == ["<unk>", "<s>", "</s>"] and all(t == T.CONTROL for t in ttypes[:3]), ttypes[:3]
    n_bytes = summary["byte_tokens"]
    assert all(t == T.BYTE for t in ttypes[3:3 + n_bytes]) and tokens[3 + n_bytes:] == summary["pieces"]
    assert all(t == T.NORMAL for t in ttypes[3 + n_bytes:])
    for key, want in (("bos", 1), ("eos", 2)):  # (SpecialVocab reads unk from a tokenizer.json: none here)
        assert int(f[f"tokenizer.ggml.{key}_token_id"].contents()) == want, key
    assert f["tokenizer.ggml.add_bos_token"].contents() is True


def check_tokenizer(gguf, reader, summary):
    """The written vocabulary against itself: every merge's parts and result are NORMAL tokens, every
    byte-level token is NORMAL, the specials CONTROL, the bos/eos/pad ids inside the vocabulary."""
    f = reader.fields
    if f["tokenizer.ggml.model"].contents() == "llama":
        return check_spm_tokenizer(gguf, reader, summary)
    tokens = f["tokenizer.ggml.tokens"].contents()
    ttypes = f["tokenizer.ggml.token_type"].contents()
    merges = f["tokenizer.ggml.merges"].contents()
    assert len(tokens) == len(ttypes) == summary["tokens"] == len(set(tokens)), summary
    assert len(merges) == summary["merges"]
    T = gguf.TokenType
    index = {t: i for i, t in enumerate(tokens)}
    for m in merges:
        a, b = m.split(" ")
        for t in (a, b, a + b):
            assert t in index and ttypes[index[t]] == T.NORMAL, (m, t)
    for i, (t, ty) in enumerate(zip(tokens, ttypes)):
        assert ty == (T.CONTROL if str(i) in summary["special"] else T.NORMAL), (i, t, ty)
        assert str(i) not in summary["special"] or summary["special"][str(i)] == t
    byte_chars = set(gguf.vocab.bytes_to_unicode().values())
    assert sum(t in byte_chars for t in tokens) == summary["byte_tokens"]
    assert all(set(t) <= byte_chars for t, ty in zip(tokens, ttypes) if ty == T.NORMAL)
    ids = [k for k in f if k.startswith("tokenizer.ggml.") and k.endswith("_token_id")]
    # (gpt-oss's config.json has bos_token_id null: no BOS written)
    want = ("eos", "padding") if f["tokenizer.ggml.pre"].contents() == "gpt-4o" else ("bos", "eos", "padding")
    assert {f"tokenizer.ggml.{k}_token_id" for k in want} <= set(ids), ids
    for key in ids:  # GLM's also unknown, eot, eom
        tid = int(f[key].contents())
        assert str(tid) in summary["special"], (key, tid)
    assert f["tokenizer.ggml.model"].contents() == "gpt2"


def requantize(gguf, model, qtype, ftype):
    """Makes `model` (built with MOSTLY_Q8_0) write `qtype` wherever prepare_tensors would write Q8_0.

    prepare_tensors asks `gguf.quants.quantize(data, Q8_0)` for each tensor that gets the outtype. The
    stand-in quantizes that tensor's f32 values with `qtype` instead — raising gguf.QuantError where it
    cannot, so the converter's except branch falls back to F16 — and hands the f32 array back, so the
    converter's own bookkeeping (its log line's shape) runs as for Q8_0; add_tensor then stores the `qtype`
    blocks with raw_dtype `qtype`. Every other call (F32, the F16 fallback) is gguf-py's own."""
    Q8_0 = gguf.GGMLQuantizationType.Q8_0
    real_quantize = gguf.quants.quantize
    real_add_tensor = model.gguf_writer.add_tensor
    real_prepare_tensors = model.prepare_tensors
    pending = []

    def quantize(data, want):
        if want != Q8_0:
            return real_quantize(data, want)
        blocks = real_quantize(data, qtype)
        pending.append((data, blocks))
        return data

    def add_tensor(name, tensor, raw_shape=None, raw_dtype=None, **kwargs):
        if raw_dtype == Q8_0:
            data, blocks = pending.pop()
            assert data is tensor and not pending, name
            tensor, raw_dtype = blocks, qtype
        real_add_tensor(name, tensor, raw_shape=raw_shape, raw_dtype=raw_dtype, **kwargs)

    def prepare_tensors():
        gguf.quants.quantize = quantize
        try:
            real_prepare_tensors()
        finally:
            gguf.quants.quantize = real_quantize
        assert not pending
        model.ftype = ftype  # general.file_type, written by prepare_metadata's set_gguf_parameters

    model.gguf_writer.add_tensor = add_tensor
    model.prepare_tensors = prepare_tensors


def write_weights(gguf, conversion, st, outtype, path, pre):
    """Converts the staged golden `st` (mf.stage_checkpoint, with write_tokenizer's files) into `path`;
    returns the converter class."""
    T, F = gguf.GGMLQuantizationType, gguf.LlamaFileType
    extra = {"q4_0": (T.Q4_0, F.MOSTLY_Q4_0), "q5_0": (T.Q5_0, F.MOSTLY_Q5_0),
             "mxfp4": (T.MXFP4, F.MOSTLY_MXFP4_MOE)}
    ftype = {"f16": F.MOSTLY_F16, "q8_0": F.MOSTLY_Q8_0}.get(outtype, F.MOSTLY_Q8_0)
    _, cls, model = mf.make_model(gguf, conversion, st.folder, path, st.no_mtp, True, ftype=ftype)
    use_converter_vocab(gguf, model, pre)
    if outtype in extra:
        requantize(gguf, model, *extra[outtype])
    mf.write_model(model, cls, path)
    return cls


def generate(out: Path, llama: Path):
    gguf, conversion = mf.load_converter(llama)
    # The Mixtral golden's config.json has no `architectures` (make_gguf_model_fixtures.py's table has no
    # mixtral: its metadata fixtures do not cover it); save_pretrained would write MixtralForCausalLM.
    mf.ARCHITECTURES.setdefault("mixtral", "MixtralForCausalLM")
    out.mkdir(parents=True, exist_ok=True)
    files = {}
    for source in SOURCES:
        name = Path(source).name
        for outtype in OUTTYPES + EXTRA.get(name, []):
            with tempfile.TemporaryDirectory() as tmp:
                st = mf.stage_checkpoint(name, ROOT / "tests/data" / source, Path(tmp))
                assert st.hf, name
                arch = st.config["architectures"][0]
                pre = ("glm4" if arch.startswith("Glm4Moe") else "qwen35" if "Qwen3_5" in arch else
                       "gpt-4o" if arch.startswith("GptOss") else "llama-spm" if arch.startswith("Mixtral")
                       else "qwen2")
                tokenizer = write_tokenizer(gguf, st, pre)
                fname = f"{name}.{outtype}.gguf"
                cls = write_weights(gguf, conversion, st, outtype, out / fname, pre)
            data = (out / fname).read_bytes()
            reader = gguf.GGUFReader(out / fname)
            check_tokenizer(gguf, reader, tokenizer)
            file_type = int(reader.fields["general.file_type"].parts[-1][0])
            files[fname] = {
                "golden": name,
                "source": source,  # under tests/data: the checkpoint converted and the prompt's place
                # The checkpoint's weights as converted: scripts/gguf-fixtures.sh checks the generated
                # tests/data/gguf/hf checkpoints against it before it converts them.
                "source_sha256": hashlib.sha256(
                    (ROOT / "tests/data" / source / "model.safetensors").read_bytes()).hexdigest(),
                "outtype": outtype,
                "how": (f"convert_hf_to_gguf --outtype {outtype}" if outtype in OUTTYPES else
                        f"convert_hf_to_gguf --outtype q8_0 with gguf.quants.quantize({outtype.upper()}) "
                        "in place of Q8_0 (tools/make_gguf_weight_fixtures.py)"),
                "file_type": gguf.LlamaFileType(file_type).name,
                "converter_class": cls.__name__,
                "architecture": gguf.MODEL_ARCH_NAMES[cls.model_arch],
                "mode": "--no-mtp" if st.no_mtp else "",
                "bytes": len(data),
                "sha256": hashlib.sha256(data).hexdigest(),
                "tokenizer": {"pre": pre, **tokenizer},
                "tensors": {t.name: t.tensor_type.name for t in reader.tensors},
            }
    index = {"converter": mf.converter_versions(llama, CONVERTER_FILES), "files": files}
    (out / "index.json").write_text(json.dumps(index, indent=2) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--out", default=str(ROOT / "tests/data/gguf/weights"))
    ap.add_argument("--llama", default=os.environ.get("LLAMA_CPP", "/tmp/llama.cpp"))
    ap.add_argument("--check", action="store_true", help="regenerate into a temp folder and compare")
    args = ap.parse_args()
    mf.write_or_check(generate, Path(args.out), Path(args.llama), args.check)


if __name__ == "__main__":
    main()
