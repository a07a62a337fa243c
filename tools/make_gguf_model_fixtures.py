#!/usr/bin/env python3
"""make_gguf_model_fixtures.py — GGUF model metadata and tensor manifests written by llama.cpp's own converter.

Purpose
    sluice reads a model's config (src/model/config_gguf.h) and maps tensor names and values
    (src/model/tensor_map_gguf.h) from GGUF files as llama.cpp's convert_hf_to_gguf.py writes them. This
    script runs that converter's code — conversion/qwen.py's classes, their `set_gguf_parameters`,
    `modify_tensors` and base.py's `prepare_tensors` / `prepare_metadata` — on every golden config (and the
    full-size configs in ../shared/model-configs), so tests/unit/gguf_model_test.cpp checks sluice against
    what the converter really writes, not against a re-telling of it.

How to run (numpy, llama.cpp's source; no torch, no transformers)
    /usr/bin/python3 tools/make_gguf_model_fixtures.py [--llama /tmp/llama.cpp] [--check]
    llama.cpp's source: `tar xJf .devcarry/llama/llama.txz -C /tmp/llama.cpp` (or see make_gguf_fixtures.py).
    numpy: `apt-get install -y python3-numpy`. torch and transformers are not installed here (no PyPI):
    tools/torch_numpy_shim.py stands in for the few torch calls the Qwen classes make, and transformers'
    AutoConfig fails, so ModelBase.load_hparams takes its own fallback and reads config.json as written
    (with transformers, AutoConfig.to_dict() adds the config class's defaults; they differ only for fields a
    config.json omits). Deterministic: re-running writes identical bytes (--check compares).

What it writes (tests/data/gguf/model/)
    NAME.gguf          metadata only (no tensors): what the converter writes for NAME's config, as
                       `model.write()` would put it in the file's header — general.*, {arch}.*, tokenizer.*
    NAME.tensors.json  for the Hugging Face bf16 goldens (the checkpoints the converter can read: it does
                       not read MLX's quantized ones): every tensor the converter writes with --outtype f32,
                       [name, ggml dims (ne[0] first), SHA-256 of its little-endian f32 values], and the
                       values themselves for `ssm_a` (−exp(A_log): numpy's exp, an ulp from torch's and C++'s)
    index.json         the converter's version (gguf-py's, and the SHA-256 of the files that decide the
                       output), then per fixture: its config, the converter class and llama.cpp architecture, the MTP
                       layers the file holds, whether the checkpoint ties embeddings (no output.weight), whether
                       tokenizer.ggml.tokens was written, and the mode (--no-mtp where the checkpoint has no
                       MTP head: the converter asserts on Qwen3-Next without one)

    The vocabulary: the goldens ship no tokenizer, so get_vocab_base (which needs transformers'
    AutoTokenizer) is replaced by a tokenizer with no tokens — config.json's vocab_size entries, every one a
    "[PAD{i}]" filler, which is what get_vocab_base writes for ids the tokenizer lacks; tokenizer.ggml.pre is
    "qwen2" ("qwen35" for Qwen3.5). gguf-py's SpecialVocab runs as the converter runs it (bos/eos from
    config.json). For the full-size configs the token list (151936 or 248320 strings, ~3 MB) is left out;
    the test adds config.json's vocab_size entries in memory.
"""
import argparse
import filecmp
import hashlib
import json
import os
import shutil
import sys
import tempfile
import types
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
GOLDENS = ROOT / "tests/data/goldens"
SHARED_CONFIGS = ROOT.parent / "shared/model-configs"
FULL_SIZE = ["qwen3-30b-a3b", "qwen3-next-80b-a3b.hf", "qwen3.5-397b-a17b", "qwen3.6-35b-a3b"]
# What save_pretrained writes as `architectures` for a model_type: the converter picks its class by it,
# and five goldens' config.json (written from a bare config) have none.
ARCHITECTURES = {"qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM",
                 "qwen3_next": "Qwen3NextForCausalLM", "qwen3_5_moe": "Qwen3_5MoeForConditionalGeneration",
                 "glm4_moe": "Glm4MoeForCausalLM", "qwen2_moe": "Qwen2MoeForCausalLM",
                 "gpt_oss": "GptOssForCausalLM"}


def load_converter(llama: Path):
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import torch_numpy_shim
    torch_numpy_shim.install()
    sys.path.insert(0, str(llama / "gguf-py"))
    sys.path.insert(0, str(llama))
    import logging
    logging.disable(logging.WARNING)  # the converter's info/warning lines (AutoConfig's failure among them)
    import gguf
    import conversion
    return gguf, conversion


def safetensors_names(path: Path):
    if not path.is_file():
        return None
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
    return sorted(k for k in header if k != "__metadata__")


def make_model(gguf, conversion, src: Path, out: Path, no_mtp: bool, with_tokens: bool, mtp_names=0, ftype=None):
    """The converter's model class for `src`, as convert_hf_to_gguf.py main() builds it (--outtype f32, or
    `ftype`: a gguf.LlamaFileType, as main()'s ftype_map gives it for --outtype).
    `mtp_names`: for a config run without its (MLX) weights, the MTP layers the checkpoint's names hold —
    what _QwenMtpMixin.filter_tensors would have counted from them (opt_num_mtp_layers)."""
    hparams = conversion.ModelBase.load_hparams(src, False)
    arch = conversion.get_model_architecture(hparams, conversion.ModelType.TEXT)
    cls = conversion.get_model_class(arch)
    cls.no_mtp = no_mtp  # main(): --no-mtp sets the class attribute
    index_tensors = cls.index_tensors
    if mtp_names:
        def counted(self, remote_hf_model_id=None):
            tensors = index_tensors(self, remote_hf_model_id=remote_hf_model_id)
            type(self).opt_num_mtp_layers = mtp_names
            return tensors
        cls.index_tensors = counted
    try:
        model = cls(src, gguf.LlamaFileType.ALL_F32 if ftype is None else ftype, out, eager=True)
    finally:
        cls.index_tensors = index_tensors
    text = {**hparams, **hparams.get("text_config", {})}
    pre = "qwen35" if "Qwen3_5" in arch else "qwen2"

    def set_vocab():  # _set_vocab_gpt2 with get_vocab_base's output for a tokenizer without tokens
        model.gguf_writer.add_tokenizer_model("gpt2")
        model.gguf_writer.add_tokenizer_pre(pre)
        if with_tokens:
            n = text["vocab_size"]
            model.gguf_writer.add_token_list([f"[PAD{i}]" for i in range(n)])
            model.gguf_writer.add_token_types([gguf.TokenType.UNUSED] * n)
        gguf.SpecialVocab(src, load_merges=True).add_to_gguf(model.gguf_writer, quiet=True)

    model.set_vocab = set_vocab
    return arch, cls, model


def write_metadata_only(gguf, conversion, src, path, no_mtp, with_tokens, mtp_names):
    arch, cls, model = make_model(gguf, conversion, src, path, no_mtp, with_tokens, mtp_names)
    model.prepare_metadata(vocab_only=False)  # Metadata, set_gguf_parameters, set_vocab (TextModel)
    model.gguf_writer.write_header_to_file(path=path)
    model.gguf_writer.write_kv_data_to_file()
    model.gguf_writer.close()
    cls.no_mtp = False
    return arch, cls, model


def write_model(model, cls, path):
    """ModelBase.write() with progress=False (its tqdm bar needs a package this machine lacks)."""
    model.prepare_tensors()
    model.prepare_metadata(vocab_only=False)
    model.gguf_writer.write_header_to_file(path=path)
    model.gguf_writer.write_kv_data_to_file()
    model.gguf_writer.write_tensors_to_file(progress=False)
    model.gguf_writer.close()
    cls.no_mtp = False


def tensor_manifest(gguf, conversion, src, no_mtp):
    """Runs the whole conversion (--outtype f32) and reads the file back with gguf-py."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.gguf"
        _, cls, model = make_model(gguf, conversion, src, path, no_mtp, True)
        write_model(model, cls, path)
        reader = gguf.GGUFReader(path)
        tensors = []
        for t in reader.tensors:
            assert t.tensor_type == gguf.GGMLQuantizationType.F32, (t.name, t.tensor_type)
            values = np.ascontiguousarray(t.data, dtype="<f4")
            entry = {"name": t.name, "dims": [int(d) for d in t.shape],
                     "sha256": hashlib.sha256(values.tobytes()).hexdigest()}
            if t.name.endswith(".ssm_a"):
                entry["values"] = [float(v) for v in values.reshape(-1)]
            tensors.append(entry)
        return sorted(tensors, key=lambda e: e["name"])


def stage_checkpoint(name: str, src: Path, tmp: Path):
    """The folder the converter reads, made under `tmp`: NAME/config.json (with `architectures`) and, for a
    Hugging Face bf16 golden, a link to its model.safetensors; and what the checkpoint's names tell. `src`:
    a golden's folder or a config file."""
    config = json.loads((src if src.is_file() else src / "config.json").read_text())
    folder = tmp / name
    folder.mkdir()
    names = safetensors_names(src / "model.safetensors") if src.is_dir() else None
    hf_bf16 = names is not None and name.endswith("_hf_bf16")
    # The converter reads the Hub's gpt-oss MXFP4 blocks too (GptOssModel.repack_mxfp4): such a checkpoint
    # is linked as well, but has no f32 tensor manifest (hf_bf16 stays false).
    hf = hf_bf16 or (names is not None and name.endswith("_hf_mxfp4"))
    if hf:  # the converter cannot read MLX's U32 codes: those run from the config alone
        os.symlink(src / "model.safetensors", folder / "model.safetensors")
    config.setdefault("architectures", [ARCHITECTURES[config["model_type"]]])
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    text = {**config, **config.get("text_config", {})}
    if names is not None:
        has_mtp = any(n.startswith(("mtp.", "model.mtp.")) for n in names)
        tied = not any(n.endswith("lm_head.weight") for n in names)
    else:  # the released checkpoints ship the MTP head where the config declares it
        has_mtp = "mtp_num_hidden_layers" in text
        tied = bool(text.get("tie_word_embeddings", config.get("tie_word_embeddings", False)))
    no_mtp = not has_mtp and ("Qwen3Next" in config["architectures"][0] or
                              "Qwen3_5" in config["architectures"][0])
    mtp_names = 0
    if names is not None and not hf_bf16:
        mtp_names = len({n.split(".")[2] for n in names if n.startswith("mtp.layers.")})
    return types.SimpleNamespace(folder=folder, config=config, text=text, names=names, hf_bf16=hf_bf16, hf=hf,
                                 tied=tied, no_mtp=no_mtp, with_tokens=names is not None, mtp_names=mtp_names)


def generate(out: Path, llama: Path):
    gguf, conversion = load_converter(llama)
    out.mkdir(parents=True, exist_ok=True)
    index = {}
    jobs = []
    for d in sorted(GOLDENS.iterdir()):
        if (d / "config.json").is_file():
            jobs.append((d.name, d, f"tests/data/goldens/{d.name}/config.json"))
    if SHARED_CONFIGS.is_dir():
        for name in FULL_SIZE:
            jobs.append((name, SHARED_CONFIGS / f"{name}.json", f"../shared/model-configs/{name}.json"))
    for name, src, config_ref in jobs:
        with tempfile.TemporaryDirectory() as tmp:
            st = stage_checkpoint(name, src, Path(tmp))
            src, text, hf_bf16, tied = st.folder, st.text, st.hf_bf16, st.tied
            no_mtp, with_tokens, mtp_names = st.no_mtp, st.with_tokens, st.mtp_names
            arch, cls, model = write_metadata_only(gguf, conversion, src, out / f"{name}.gguf", no_mtp,
                                                   with_tokens, mtp_names)
            if hf_bf16:
                manifest = {"what": "tensors llama.cpp's converter writes for this golden (--outtype f32): "
                                    "name, ggml dims, sha256 of the f32 values (tools/make_gguf_model_fixtures.py)",
                            "tensors": tensor_manifest(gguf, conversion, src, no_mtp)}
                (out / f"{name}.tensors.json").write_text(json.dumps(manifest, indent=1) + "\n")
            index[name] = {
                "config": config_ref,
                "converter_class": cls.__name__,
                "architecture": gguf.MODEL_ARCH_NAMES[cls.model_arch],
                "mtp_layers": model.block_count - text["num_hidden_layers"],
                "tied_embeddings": tied,
                "tokens": with_tokens,
                "mode": "--no-mtp" if no_mtp else "",
                "tensors": f"{name}.tensors.json" if hf_bf16 else None,
            }
    (out / "index.json").write_text(json.dumps({"converter": converter_versions(llama), "fixtures": index},
                                               indent=2, sort_keys=True) + "\n")


def converter_versions(llama: Path, files=("conversion/qwen.py", "conversion/base.py",
                                           "gguf-py/gguf/tensor_mapping.py")):
    """gguf-py's version and the SHA-256 of the llama.cpp files that decide the output."""
    converter = {"gguf-py": gguf_version(llama)}
    for f in files:
        converter[f + " sha256"] = hashlib.sha256((llama / f).read_bytes()).hexdigest()
    return converter


def gguf_version(llama: Path):
    for line in (llama / "gguf-py/pyproject.toml").read_text().splitlines():
        if line.startswith("version"):
            return line.split("=", 1)[1].strip().strip('"')
    return "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--out", default=str(ROOT / "tests/data/gguf/model"))
    ap.add_argument("--llama", default=os.environ.get("LLAMA_CPP", "/tmp/llama.cpp"))
    ap.add_argument("--check", action="store_true", help="regenerate into a temp folder and compare")
    args = ap.parse_args()
    write_or_check(generate, Path(args.out), Path(args.llama), args.check)


def write_or_check(generate_fn, out: Path, llama: Path, check: bool):
    """generate_fn(folder, llama) into `out`, or (check) into a temp folder, comparing each file it writes
    with out's byte for byte: prints the ones that differ or are missing, exits 1 if any."""
    if not check:
        generate_fn(out, llama)
        return
    with tempfile.TemporaryDirectory() as tmp:
        generate_fn(Path(tmp), llama)
        bad = [f.name for f in sorted(Path(tmp).iterdir())
               if not (out / f.name).is_file() or not filecmp.cmp(f, out / f.name, False)]
        print("\n".join(bad) if bad else "fixtures up to date")
        sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
