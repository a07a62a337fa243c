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

Usage: /usr/bin/python3 tools/check_synth_gguf_glm4moe.py [--llama DIR]   (DIR: llama.cpp source with
conversion/ and gguf-py/; default the sluice cache's 80fb11ac checkout). Exit status 1 on an unexpected
difference.
"""
import argparse
import sys
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


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama", type=Path,
                    default=Path("/root/.cache/sluice/llama.cpp-80fb11ac73e66d89eae2c6a91d8a77428fa733ed"))
    args = ap.parse_args()
    gguf, conversion = mf.load_converter(args.llama)
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
