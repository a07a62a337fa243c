#!/usr/bin/env python3
"""train_tiny.py — train sluice's built-in default model: a small Qwen3-Next MoE on Python source.

Purpose
    Random-weight checkpoints print gibberish and route uniformly. This script trains a small but real
    model of the Qwen3-Next architecture (Gated DeltaNet + gated full attention, many routed experts,
    a shared expert) so the demo shows real text and tests can check quality end to end. It produces
    everything under models/tiny-next/ except the model card (README.md), in one run of under ten
    minutes on one H200:
        1. corpus: the .py files of installed, permissively licensed packages (licence read from each
           distribution's metadata and recorded) plus CPython's standard library (PSF-2.0); files are
           de-duplicated by content; held-out files are chosen by a hash of their path (split by file);
        2. tokenizer: byte-level BPE trained with HF `tokenizers` on the training files, Qwen2 split
           regex + ByteLevel(use_regex=false), NFC, ByteLevel decoder, special tokens at the end;
        3. model: transformers' Qwen3NextForCausalLM, AdamW, bf16 autocast over f32 master weights,
           Switch-style aux load-balancing loss (output_router_logits), fixed seeds, fixed step count;
        4. export: mlx-lm 4-bit layout via tools/make_goldens.py's converter (the one sluice's goldens
           already exercise), read back through the independent reader;
        5. evaluation on the CPU in f32: the perplexity procedure `sluice perplexity` implements, for
           the f32 master weights, their bf16 rounding and the shipped 4-bit weights; routing statistics
           of the shipped weights; greedy samples.

How to run (on a machine with torch, transformers >= 5.17 (qwen3_next), tokenizers, numpy, a GPU)
    python3 tools/train_tiny.py --out OUTDIR --chat-template-from tokenizer_config.json \
        [--pack-dir $OUT]          # defaults = the shipped run: batch 64 x 512, 1400 steps
    --pack-dir writes OUTDIR as tar parts of <= 15 MiB (tiny.tar.partN) after export and again at the
    end, so a run cut short still returns the trained model.

Design notes
    * Expert FFNs train through torch's grouped GEMM in bf16 (a sorted-by-expert forward patched onto
      each experts module, compared against transformers' own forward before training); transformers'
      per-expert loop is the fallback and the reference. Evaluation always uses transformers' code.
    * The real Qwen3 tokenizer (151,936 rows) would make the embedding and lm_head ~78M parameters
      each at hidden 256 — more than the whole model; an 8k vocabulary keeps them at 2M each.
    * Rejected: training a bespoke MoE and converting — the point is that transformers' own
      Qwen3-Next code defines the model that sluice must match.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata as ilm
import io
import json
import math
import os
import re
import sys
import sysconfig
import tarfile
import time
import types

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_goldens as mg  # noqa: E402  (MLX quantiser/packer/writer and the layout converters)

SEED = 20261130
T_START = time.time()

# Candidate distributions (filtered again by the licence in their metadata at run time).
PACKAGES = [
    "numpy", "scipy", "sympy", "networkx", "pandas", "scikit-learn", "statsmodels", "transformers",
    "torch", "jinja2", "click", "rich", "pygments", "attrs", "requests", "urllib3", "six", "setuptools",
    "packaging", "pyparsing", "matplotlib", "markdown", "werkzeug", "httpx", "anyio", "pytest", "pluggy",
    "idna", "einops", "joblib", "typer", "xarray", "sortedcontainers", "accelerate", "huggingface-hub",
    "safetensors", "pyyaml", "toolz", "flax", "optax", "jax", "lightning", "torchvision", "sentence-transformers",
]
_PERMISSIVE = re.compile(r"\b(MIT|BSD|Apache|PSF|Python Software Foundation|ISC|0BSD|Zlib|CC0)", re.I)
_COPYLEFT = re.compile(r"\b(GPL|LGPL|AGPL|MPL|Mozilla|EUPL|CDDL|EPL)\b", re.I)

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
NONSPECIAL_ADDED = ["<think>", "</think>"]
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
BYTELEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}


def log(msg: str, fh=None) -> None:
    line = f"[{time.time() - T_START:7.1f}s] {msg}"
    print(line, flush=True)
    if fh is not None:
        fh.write(line + "\n")
        fh.flush()


# ----------------------------------------------------------------------------------------------
# corpus
# ----------------------------------------------------------------------------------------------


def licence_of(dist) -> str:
    md = dist.metadata
    expr = md.get("License-Expression")
    if expr:
        return expr.strip()
    cls = [c.split("::")[-1].strip() for c in (md.get_all("Classifier") or []) if c.startswith("License ::")]
    if cls:
        return "; ".join(cls)
    lic = (md.get("License") or "").strip().splitlines()
    return lic[0][:120] if lic else ""


def good_source(text: str) -> bool:
    if "\x00" in text or len(text) < 400:
        return False
    return max((len(l) for l in text.splitlines()), default=0) <= 300


def collect_corpus(max_total_bytes: int, per_pkg_bytes: int, heldout_bytes: int, fh):
    rng = np.random.default_rng(SEED)
    sources = []  # (name, version, licence, root, [relative paths])
    for name in PACKAGES:
        try:
            dist = ilm.distribution(name)
        except ilm.PackageNotFoundError:
            continue
        lic = licence_of(dist)
        ok = bool(_PERMISSIVE.search(lic)) and not _COPYLEFT.search(lic)
        files = [str(f) for f in (dist.files or []) if str(f).endswith(".py") and "_vendor" not in str(f)]
        root = str(dist.locate_file(""))
        sources.append((dist.metadata["Name"], dist.version, lic, ok, root, sorted(files)))
    stdlib = sysconfig.get_paths()["stdlib"]
    skip = ("test", "tests", "idlelib", "lib2to3", "site-packages", "dist-packages", "ensurepip", "__pycache__", "turtledemo")
    std_files = []
    for dp, dns, fns in os.walk(stdlib):
        dns[:] = sorted(d for d in dns if d not in skip)
        for fn in sorted(fns):
            if fn.endswith(".py"):
                std_files.append(os.path.relpath(os.path.join(dp, fn), stdlib))
    sources.append(("cpython-stdlib", sys.version.split()[0], "PSF-2.0", True, stdlib, std_files))

    seen, docs, pkg_info = set(), [], []
    for name, ver, lic, ok, root, files in sources:
        info = {"name": name, "version": ver, "license": lic, "used": ok, "files": 0, "bytes": 0}
        pkg_info.append(info)
        if not ok:
            continue
        order = rng.permutation(len(files))
        for i in order:
            if info["bytes"] >= per_pkg_bytes:
                break
            p = os.path.join(root, files[i])
            try:
                if os.path.getsize(p) > 150_000:
                    continue
                with open(p, "rb") as f:
                    text = f.read().decode("utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            if not good_source(text):
                continue
            h = hashlib.sha1(text.encode()).hexdigest()
            if h in seen:
                continue
            seen.add(h)
            key = f"{name}/{files[i]}"
            docs.append((key, text))
            info["files"] += 1
            info["bytes"] += len(text.encode())
    # held-out: files of 2-24 KB in order of sha1(package/path), until heldout_bytes
    cand = sorted((hashlib.sha1(k.encode()).hexdigest(), k, t) for k, t in docs if 2000 <= len(t) <= 24000)
    held, hb = set(), 0
    for _, k, t in cand:
        if hb >= heldout_bytes:
            break
        held.add(k)
        hb += len(t.encode())
    heldout = [(k, t) for k, t in docs if k in held]
    train = [(k, t) for k, t in docs if k not in held]
    # cap the training text, keeping the per-package mix
    train = [train[i] for i in rng.permutation(len(train))]
    total, capped = 0, []
    for k, t in train:
        if total >= max_total_bytes:
            break
        capped.append((k, t))
        total += len(t.encode())
    for info in pkg_info:
        info["heldout_files"] = sum(1 for k, _ in heldout if k.startswith(info["name"] + "/"))
    log(f"corpus: {len(capped)} train files {total / 1e6:.1f} MB, {len(heldout)} held-out files {hb / 1e3:.0f} KB", fh)
    return capped, heldout, pkg_info


# ----------------------------------------------------------------------------------------------
# tokenizer
# ----------------------------------------------------------------------------------------------


def train_tokenizer(texts, vocab_size: int, out_dir: str, chat_template: str, fh):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False, fuse_unk=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    n_added = len(SPECIALS) + len(NONSPECIAL_ADDED)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - n_added,
        min_frequency=2,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
    )
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    n_bpe = tok.get_vocab_size()
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIALS])
    tok.add_tokens([AddedToken(s, special=False, normalized=False) for s in NONSPECIAL_ADDED])
    path = os.path.join(out_dir, "tokenizer.json")
    tok.save(path)
    # Byte-identical structure to Qwen3's tokenizer.json for the parts the python API cannot set.
    d = json.load(open(path))
    d["pre_tokenizer"]["pretokenizers"][1] = dict(BYTELEVEL)
    d["decoder"] = dict(BYTELEVEL)
    d["post_processor"] = dict(BYTELEVEL)
    with open(path, "w") as f:
        json.dump(d, f, ensure_ascii=False, indent=2)
    tok = Tokenizer.from_file(path)
    ids = {s: tok.token_to_id(s) for s in SPECIALS + NONSPECIAL_ADDED}
    added = {}
    for s in SPECIALS + NONSPECIAL_ADDED:
        added[str(ids[s])] = {
            "content": s, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
            "special": s in SPECIALS,
        }
    cfg = {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": added,
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "bos_token": None,
        "chat_template": chat_template,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 4096,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, ensure_ascii=False, indent=2)
    log(f"tokenizer: {n_bpe} BPE tokens + {n_added} added = {tok.get_vocab_size()}; ids {ids}", fh)
    return tok, ids


# ----------------------------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------------------------


def model_config(vocab: int, eos_id: int, bos_id: int) -> dict:
    c = mg._qwen3_next_cfg(
        h=256, nh=4, nkv=2, hd=64, nk=2, nv=4, dk=64, dv=64, moe_i=64, sh_i=256, e=64, k=8, v=vocab, layers=8, interval=4
    )
    c.update(
        {
            "intermediate_size": 512,  # unused: every layer is sparse
            "bos_token_id": bos_id,
            "eos_token_id": eos_id,
            "max_position_embeddings": 4096,
            "router_aux_loss_coef": 0.01,
            "output_router_logits": False,
            "initializer_range": 0.02,
        }
    )
    return c


def make_model(cfg_dict: dict, attn: str):
    import torch
    import transformers

    d = json.loads(json.dumps(cfg_dict))
    d.pop("architectures", None)
    d.pop("model_type")
    d.pop("torch_dtype", None)
    cfg = transformers.AutoConfig.for_model("qwen3_next", **d)
    cfg._attn_implementation = attn
    torch.manual_seed(SEED)
    m = transformers.Qwen3NextForCausalLM(cfg)
    mg.rewire_gdn_modules(m, mg.CallCounter())
    return m.to(torch.float32)


def grouped_experts_forward(self, hidden_states, top_k_index, top_k_weights):
    """Sorted-by-expert SwiGLU experts through torch's grouped GEMM in bf16 (training on CUDA only)."""
    import torch
    import torch.nn.functional as F

    k = top_k_index.shape[-1]
    flat = top_k_index.reshape(-1)
    ids, perm = torch.sort(flat)
    tok = perm // k
    x = hidden_states[tok].to(torch.bfloat16)  # [T*k, H]
    counts = torch.bincount(ids, minlength=self.num_experts)
    offs = torch.cumsum(counts, 0, dtype=torch.int32)
    gu = F.grouped_mm(x, self.gate_up_proj.to(torch.bfloat16).transpose(-2, -1), offs=offs)  # [T*k, 2I]
    g, u = gu.chunk(2, dim=-1)
    a = F.silu(g) * u
    y = F.grouped_mm(a, self.down_proj.to(torch.bfloat16).transpose(-2, -1), offs=offs)  # [T*k, H]
    y = y.float() * top_k_weights.reshape(-1)[perm, None].float()
    out = torch.zeros(hidden_states.shape, dtype=torch.float32, device=hidden_states.device)
    out.index_add_(0, tok, y)
    return out.to(hidden_states.dtype)


# ----------------------------------------------------------------------------------------------
# export (mlx-lm 4-bit layout) and the weights as sluice reads them back
# ----------------------------------------------------------------------------------------------


def export_mlx(model, cfg_dict: dict, out_dir: str, bits: int, gs: int):
    params = {n: p.detach().float().cpu().numpy() for n, p in model.named_parameters()}
    hf = mg.mem_to_hf("qwen3_next", params)
    hf_rounded = {n: mg.round_bf16(a) for n, a in hf.items()}
    mlx = mg.hf_to_mlx_names("qwen3_next", hf_rounded)
    stored, qblock = mg.build_mlx_checkpoint("qwen3_next", mlx, bits, gs, ())
    cfg = json.loads(json.dumps(cfg_dict))
    for k in ("output_router_logits", "router_aux_loss_coef", "initializer_range"):
        cfg.pop(k, None)
    cfg["quantization"] = qblock
    cfg["quantization_config"] = dict(qblock)
    cfg = dict(sorted(cfg.items()))
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=4)
        f.write("\n")
    mg.write_safetensors(os.path.join(out_dir, "model.safetensors"), stored, {"format": "mlx"})
    stored2, _ = mg.read_safetensors(os.path.join(out_dir, "model.safetensors"))
    back_hf = mg.mlx_to_hf_names("qwen3_next", mg.read_mlx_checkpoint(stored2, qblock))
    back_mem = mg.hf_to_mem("qwen3_next", back_hf, set(params))
    assert set(back_mem) == set(params), (sorted(set(params) ^ set(back_mem)))[:8]
    bf16_mem = mg.hf_to_mem("qwen3_next", hf_rounded, set(params))
    return back_mem, bf16_mem


def load_weights(model, mem: dict):
    import torch

    sd = model.state_dict()
    for n in sd:
        if n in mem:
            assert tuple(sd[n].shape) == mem[n].shape, (n, tuple(sd[n].shape), mem[n].shape)
            sd[n] = torch.from_numpy(np.ascontiguousarray(mem[n], dtype=np.float32))
    model.load_state_dict(sd, strict=True)


# ----------------------------------------------------------------------------------------------
# evaluation (CPU, f32): the `sluice perplexity` procedure, routing statistics
# ----------------------------------------------------------------------------------------------


def perplexity(model, ids: list, ctx: int, batch: int, routing=None) -> dict:
    """Consecutive non-overlapping windows of ctx tokens (tail dropped), each from a fresh state; the
    last ctx/2 tokens of each window are scored: NLL of token i+1 given tokens <= i, i in [ctx/2-1, ctx-2]."""
    import torch

    n_win = len(ids) // ctx
    arr = torch.tensor(ids[: n_win * ctx], dtype=torch.long).view(n_win, ctx)
    half = ctx // 2
    nll, n_scored = 0.0, 0
    for b in range(0, n_win, batch):
        x = arr[b : b + batch]
        if routing is not None:
            routing.begin()
        with torch.no_grad():
            logits = model(input_ids=x, use_cache=False).logits.double()
        if routing is not None:
            routing.end(x.shape[0], ctx)
        lp = torch.log_softmax(logits[:, half - 1 : ctx - 1], dim=-1)
        tgt = x[:, half:ctx]
        nll -= lp.gather(-1, tgt.unsqueeze(-1)).sum().item()
        n_scored += tgt.numel()
    return {"ctx": ctx, "windows": n_win, "scored_tokens": n_scored, "mean_nll": nll / n_scored, "ppl": math.exp(nll / n_scored)}


class RoutingStats:
    """Hooks on every layer's router and post-attention norm; accumulates per-layer statistics."""

    def __init__(self, model, k: int, n_experts: int):
        self.k, self.E = k, n_experts
        self.layers = list(model.model.layers)
        self.L = len(self.layers)
        self.counts = np.zeros((self.L, n_experts), dtype=np.int64)
        self.repeat = np.zeros(self.L)
        self.repeat_n = np.zeros(self.L)
        self.pred_hit = np.zeros(self.L)
        self.pred_n = np.zeros(self.L)
        self.pred_exact = np.zeros(self.L)
        self._idx, self._post = {}, {}
        self.active = True
        for li, layer in enumerate(self.layers):
            layer.mlp.gate.register_forward_hook(self._gate_hook(li))
            layer.post_attention_layernorm.register_forward_hook(self._post_hook(li))

    def _gate_hook(self, li):
        def hook(_m, _inp, out):
            if self.active:
                self._idx[li] = out[2].detach().cpu().numpy()

        return hook

    def _post_hook(self, li):
        def hook(_m, inp, _out):
            if self.active:
                self._post[li] = inp[0].detach()

        return hook

    def begin(self):
        self._idx.clear()
        self._post.clear()
        self.active = True

    def end(self, n_win: int, ctx: int):
        import torch

        self.active = False
        for li in range(self.L):
            idx = self._idx[li].reshape(n_win, ctx, self.k)
            self.counts[li] += np.bincount(idx.reshape(-1), minlength=self.E)
            # experts shared with the previous token of the same window
            a = np.sort(idx[:, 1:], axis=-1)
            b = np.sort(idx[:, :-1], axis=-1)
            inter = (a[..., :, None] == b[..., None, :]).any(-1).sum(-1)
            self.repeat[li] += inter.sum() / self.k
            self.repeat_n[li] += inter.size
            if li + 1 < self.L:
                nxt = self.layers[li + 1]
                with torch.no_grad():
                    h = nxt.post_attention_layernorm(self._post[li])
                    _, _, pidx = nxt.mlp.gate(h)
                pidx = pidx.cpu().numpy().reshape(n_win, ctx, self.k)
                act = self._idx[li + 1].reshape(n_win, ctx, self.k)
                hit = (pidx[..., :, None] == act[..., None, :]).any(-1).sum(-1)
                self.pred_hit[li] += hit.sum() / self.k
                self.pred_exact[li] += (hit == self.k).sum()
                self.pred_n[li] += hit.size

    def summary(self) -> dict:
        layers = []
        for li in range(self.L):
            c = np.sort(self.counts[li])[::-1]
            cum = np.cumsum(c) / c.sum()
            n90 = int(np.searchsorted(cum, 0.9) + 1)
            rec = {
                "layer": li,
                "experts_covering_90pct": n90,
                "share_of_experts_covering_90pct": n90 / self.E,
                "max_expert_load_share": float(c[0] / c.sum()),
                "unused_experts": int((c == 0).sum()),
                "previous_token_overlap": float(self.repeat[li] / self.repeat_n[li]),
            }
            if li + 1 < self.L:
                rec["next_layer_prediction_recall"] = float(self.pred_hit[li] / self.pred_n[li])
                rec["next_layer_prediction_exact_set"] = float(self.pred_exact[li] / self.pred_n[li])
            layers.append(rec)
        return {
            "num_experts": self.E,
            "top_k": self.k,
            "definitions": {
                "share_of_experts_covering_90pct": "smallest number of experts whose routed (token, expert) "
                "assignments sum to >= 90% of the layer's assignments, divided by num_experts (uniform "
                "routing gives ~0.9)",
                "previous_token_overlap": "mean over tokens (2nd onward in each window) of |experts(t) & "
                "experts(t-1)| / top_k in the same layer",
                "next_layer_prediction_recall": "mean |predicted & actual| / top_k for layer L+1, predicted by "
                "applying layer L+1's post_attention_layernorm and router to layer L's residual stream "
                "after its attention/DeltaNet mixer (what src/model/moe.cpp predict_next_experts does)",
                "next_layer_prediction_exact_set": "share of tokens where the predicted set equals the actual set",
            },
            "mean_previous_token_overlap": float(np.mean([r["previous_token_overlap"] for r in layers])),
            "mean_next_layer_prediction_recall": float(
                np.mean([r["next_layer_prediction_recall"] for r in layers if "next_layer_prediction_recall" in r])
            ),
            "layers": layers,
            "expert_counts": self.counts.tolist(),
        }


def greedy_samples(model, tok, prompts, n_new: int, eos_ids) -> list:
    import torch
    from transformers import GenerationConfig

    model.generation_config = GenerationConfig(
        do_sample=False, max_new_tokens=n_new, eos_token_id=list(eos_ids), pad_token_id=eos_ids[0],
        bos_token_id=None, use_cache=True, num_beams=1, temperature=None, top_p=None, top_k=None,
    )
    out = []
    for p in prompts:
        ids = torch.tensor([tok.encode(p, add_special_tokens=False).ids])
        with torch.no_grad():
            g = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids))
        new = g[0, ids.shape[1] :].tolist()
        out.append({"prompt": p, "completion": tok.decode(new, skip_special_tokens=False), "ids": new})
    return out


def pack(out_dir: str, pack_dir: str, part_bytes: int = 15 << 20) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        tf.add(out_dir, arcname="tiny-next")
    data = buf.getvalue()
    for fn in os.listdir(pack_dir):
        if fn.startswith("tiny.tar.part"):
            os.remove(os.path.join(pack_dir, fn))
    for i in range(0, len(data), part_bytes):
        with open(os.path.join(pack_dir, f"tiny.tar.part{i // part_bytes}"), "wb") as f:
            f.write(data[i : i + part_bytes])


# ----------------------------------------------------------------------------------------------
# main
# ----------------------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--pack-dir", default=None)
    ap.add_argument("--chat-template-from", required=True, help="a tokenizer_config.json holding Qwen3's chat_template")
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--max-data-mb", type=float, default=64)
    ap.add_argument("--per-package-mb", type=float, default=8)
    ap.add_argument("--heldout-kb", type=float, default=200)
    ap.add_argument("--tokenizer-mb", type=float, default=24, help="training text used to learn the BPE merges")
    ap.add_argument("--steps", type=int, default=1400)
    ap.add_argument("--max-train-seconds", type=float, default=420)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--ctx", type=int, default=256)
    args = ap.parse_args()

    import torch
    import tokenizers
    import transformers

    os.makedirs(args.out, exist_ok=True)
    fh = open(os.path.join(args.out, "training_log.txt"), "w")
    log(f"torch {torch.__version__} transformers {transformers.__version__} tokenizers {tokenizers.__version__} "
        f"python {sys.version.split()[0]} device {torch.cuda.get_device_name(0)}", fh)
    log(f"args {vars(args)}", fh)
    np.random.seed(SEED)
    torch.manual_seed(SEED)
    counter = mg.CallCounter()
    gdn_changes = mg.force_torch_gdn("qwen3_next", counter)
    log(f"GDN kernels: {gdn_changes}", fh)

    # 1. corpus
    train_docs, held_docs, pkg_info = collect_corpus(
        int(args.max_data_mb * 1e6), int(args.per_package_mb * 1e6), int(args.heldout_kb * 1e3), fh
    )
    heldout_text = "\n".join(t if t.endswith("\n") else t + "\n" for _, t in held_docs)
    with open(os.path.join(args.out, "heldout.txt"), "w", encoding="utf-8") as f:
        f.write(heldout_text)

    # 2. tokenizer
    tok_texts, nb = [], 0
    for _, t in train_docs:
        if nb >= args.tokenizer_mb * 1e6:
            break
        tok_texts.append(t)
        nb += len(t)
    chat_template = json.load(open(args.chat_template_from))["chat_template"]
    tok, sid = train_tokenizer(tok_texts, args.vocab, args.out, chat_template, fh)
    eot = sid["<|endoftext|>"]
    enc = tok.encode_batch([t for _, t in train_docs], add_special_tokens=False)
    stream = []
    for e in enc:
        stream.extend(e.ids)
        stream.append(eot)
    train_ids = torch.tensor(stream, dtype=torch.int32)
    held_ids = tok.encode(heldout_text, add_special_tokens=False).ids
    n_bytes = sum(len(t.encode()) for _, t in train_docs)
    log(f"tokens: train {len(stream)} ({n_bytes / len(stream):.2f} bytes/token), held-out {len(held_ids)}", fh)
    data_info = {"packages": pkg_info, "train_files": len(train_docs), "train_bytes": n_bytes, "train_tokens": len(stream),
                 "heldout_files": [k for k, _ in held_docs], "heldout_bytes": len(heldout_text.encode()),
                 "heldout_tokens": len(held_ids)}
    with open(os.path.join(args.out, "data_manifest.json"), "w") as f:
        json.dump(data_info, f, indent=1)

    # 3. model
    cfg_dict = model_config(args.vocab, eos_id=sid["<|im_end|>"], bos_id=eot)
    with open(os.path.join(args.out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": eot, "eos_token_id": [sid["<|im_end|>"], eot], "pad_token_id": eot,
                   "do_sample": False, "transformers_version": transformers.__version__}, f, indent=2)
    dev = torch.device("cuda")
    model = make_model(cfg_dict, "sdpa").to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    n_expert = sum(p.numel() for n, p in model.named_parameters() if ".mlp.experts." in n)
    E, K = cfg_dict["num_experts"], cfg_dict["num_experts_per_tok"]
    n_active = n_params - n_expert + n_expert * K // E
    log(f"params: total {n_params}, routed experts {n_expert}, active per token {n_active}", fh)

    # grouped-GEMM experts for training, checked (forward and backward) against a plain gather reference
    exp_mods = [m for m in model.modules() if type(m).__name__ == "Qwen3NextExperts"]
    m0 = exp_mods[0]
    hs = torch.randn(300, cfg_dict["hidden_size"], device=dev)
    idx = torch.stack([torch.randperm(E, device=dev)[:K] for _ in range(300)])
    w = torch.softmax(torch.randn(300, K, device=dev), -1)
    with torch.no_grad():
        gu = torch.einsum("th,tkih->tki", hs, m0.gate_up_proj[idx])  # [T, K, 2I]
        gg, uu = gu.chunk(2, dim=-1)
        ref = torch.einsum("tki,tkhi->tkh", torch.nn.functional.silu(gg) * uu, m0.down_proj[idx])
        ref = (ref * w[..., None]).sum(1)
    try:
        fast = grouped_experts_forward(m0, hs, idx, w)
        fast.square().sum().backward()
        gerr = m0.gate_up_proj.grad.isfinite().all().item() and m0.gate_up_proj.grad.abs().sum().item() > 0
        m0.gate_up_proj.grad = None
        m0.down_proj.grad = None
        rel = ((fast.detach() - ref).norm() / ref.norm()).item()
        use_fast = rel < 2e-2 and gerr
        log(f"grouped-GEMM experts vs gather reference: rel err {rel:.2e}, grads ok {gerr} -> "
            f"{'use' if use_fast else 'REJECT'}", fh)
    except Exception as e:  # noqa: BLE001
        use_fast = False
        log(f"grouped-GEMM experts unavailable ({type(e).__name__}: {e})", fh)
    if use_fast:
        for m in exp_mods:
            m.forward = types.MethodType(grouped_experts_forward, m)
    else:
        model.config._experts_implementation = "eager"
        log("training with transformers' eager per-expert loop under autocast", fh)

    decay, no_decay = [], []
    for n, p in model.named_parameters():
        (no_decay if p.ndim < 2 or "norm" in n or n.endswith(("A_log", "dt_bias")) else decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)

    def lr_at(step):
        if step < args.warmup:
            return args.lr * (step + 1) / args.warmup
        p = (step - args.warmup) / max(1, args.steps - args.warmup)
        return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, p))))

    g = torch.Generator(device="cpu").manual_seed(SEED)
    train_gpu = train_ids.to(dev)
    n_tok = train_gpu.numel()
    S, B = args.seq, args.batch
    val = torch.tensor(held_ids[: (len(held_ids) // S) * S], dtype=torch.long, device=dev).view(-1, S)[:64]

    def held_loss():
        model.eval()
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            tot = 0.0
            for i in range(0, val.shape[0], 16):
                tot += model(input_ids=val[i : i + 16], labels=val[i : i + 16]).loss.item() * val[i : i + 16].shape[0]
        model.train()
        return tot / val.shape[0]

    model.train()
    curve = []
    t0 = time.time()
    step = 0
    stopped_early = False
    while step < args.steps:
        if time.time() - t0 > args.max_train_seconds:
            stopped_early = True
            break
        for gp in opt.param_groups:
            gp["lr"] = lr_at(step)
        starts = torch.randint(0, n_tok - S - 1, (B,), generator=g)
        x = torch.stack([train_gpu[s : s + S] for s in starts.tolist()]).long()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(input_ids=x, labels=x, output_router_logits=True)
        loss = out.loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 25 == 0 or step == args.steps - 1:
            aux = out.aux_loss.item()
            lm = loss.item() - cfg_dict["router_aux_loss_coef"] * aux
            el = time.time() - t0
            rec = {"step": step, "s": round(el, 1), "lr": lr_at(step), "loss": lm, "aux": aux, "gnorm": gn.item(),
                   "tok_per_s": (step + 1) * B * S / el}
            if step % args.eval_every == 0 or step == args.steps - 1:
                rec["heldout_loss"] = held_loss()
            curve.append(rec)
            log("step {step:5d} {s:6.1f}s lr {lr:.2e} loss {loss:.4f} aux {aux:.3f} gnorm {gnorm:.2f} "
                "{tok_per_s:.0f} tok/s".format(**rec) + (f" heldout {rec['heldout_loss']:.4f}" if "heldout_loss" in rec else ""), fh)
        step += 1
    train_s = time.time() - t0
    final_held = held_loss()
    curve.append({"step": step, "s": round(train_s, 1), "heldout_loss": final_held})
    log(f"trained {step} steps ({step * B * S} tokens) in {train_s:.0f}s{' (time guard hit)' if stopped_early else ''}; "
        f"held-out loss (bf16 autocast, {val.shape[0]}x{S}) {final_held:.4f}", fh)
    with open(os.path.join(args.out, "loss_curve.json"), "w") as f:
        json.dump({"steps": step, "stopped_early": stopped_early, "train_seconds": train_s, "batch": B, "seq": S,
                   "curve": curve}, f, indent=1)

    # 4. export (mlx-lm 4-bit) — pack right away so a cut-short run still returns the model
    model_cpu = model.float().cpu()
    for m in exp_mods:
        m.__dict__.pop("forward", None)
    master = {n: p.detach().numpy().copy() for n, p in model_cpu.named_parameters()}
    q4_mem, bf16_mem = export_mlx(model_cpu, cfg_dict, args.out, bits=4, gs=64)
    size = os.path.getsize(os.path.join(args.out, "model.safetensors"))
    log(f"exported MLX 4-bit gs64: model.safetensors {size} bytes", fh)
    if args.pack_dir:
        pack(args.out, args.pack_dir)

    # 5. evaluation on the CPU in f32
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    evm = make_model(cfg_dict, "eager").eval()
    ref = {"procedure": "tokenize heldout.txt without special tokens; consecutive non-overlapping windows of ctx "
           "tokens (incomplete tail dropped); each window from a fresh state; score the last ctx/2 tokens: NLL of "
           "token i+1 given tokens <= i for i in [ctx/2-1, ctx-2]; ppl = exp(total NLL / scored tokens)",
           "compute": "PyTorch f32 on CPU, transformers Qwen3NextForCausalLM, eager attention, torch GDN fallbacks",
           "heldout_tokens": len(held_ids)}
    res = {}
    for label, mem in (("f32_master", master), ("bf16", bf16_mem), ("mlx_q4_shipped", q4_mem)):
        load_weights(evm, mem)
        rs = RoutingStats(evm, K, E) if label == "mlx_q4_shipped" else None
        t1 = time.time()
        res[label] = perplexity(evm, held_ids, args.ctx, 16, rs)
        log(f"perplexity {label}: {res[label]} ({time.time() - t1:.0f}s)", fh)
        if rs is not None:
            rs.active = False
            stats = rs.summary()
            stats["weights"] = "shipped MLX 4-bit weights, dequantized to f32; windows as in reference_perplexity.json"
            with open(os.path.join(args.out, "routing_stats.json"), "w") as f:
                json.dump(stats, f, indent=1)
            log("routing: 90%-cover share per layer " + str([round(r["share_of_experts_covering_90pct"], 3) for r in stats["layers"]])
                + f"; prev-token overlap {stats['mean_previous_token_overlap']:.3f}; next-layer recall "
                f"{stats['mean_next_layer_prediction_recall']:.3f}", fh)
    ref.update({"ctx": args.ctx, "windows": res["mlx_q4_shipped"]["windows"],
                "scored_tokens": res["mlx_q4_shipped"]["scored_tokens"], "results": res})
    with open(os.path.join(args.out, "reference_perplexity.json"), "w") as f:
        json.dump(ref, f, indent=2)
    if args.pack_dir:
        pack(args.out, args.pack_dir)

    prompts = ["def fibonacci(n):\n", "import numpy as np\n\n\ndef ", "class Stack:\n    def __init__(self):\n",
               "    for i in range(len(", "# Licensed under the Apache License"]
    samples = {}
    eos = [sid["<|im_end|>"], eot]
    for label, mem in (("f32_master", master), ("mlx_q4_shipped", q4_mem)):
        load_weights(evm, mem)
        samples[label] = greedy_samples(evm, tok, prompts, 64, eos)
        for s in samples[label]:
            log(f"sample {label} {s['prompt']!r} -> {s['completion']!r}", fh)
    with open(os.path.join(args.out, "samples.json"), "w") as f:
        json.dump(samples, f, indent=1)
    log("done", fh)
    fh.close()
    if args.pack_dir:
        pack(args.out, args.pack_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
