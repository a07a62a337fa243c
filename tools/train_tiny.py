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

MTP head (--mtp-from DIR)
    python3 tools/train_tiny.py --mtp-from models/tiny-next --out OUTDIR [--pack-dir $OUT]
    trains only a multi-token-prediction head (make_goldens.make_mtp_head) on DIR's frozen, shipped
    4-bit model (same corpus, DIR's tokenizer), for --mtp-steps or --mtp-max-seconds (240 s), and writes
    OUTDIR = DIR with the head's mtp.* tensors added to model.safetensors (quantised as the rest; DIR's
    tensors byte-identical), its quantisation overrides added to config.json, an "MTP head" section
    appended to README.md, mtp_stats.json and mtp_training_log.txt; the other files copied unchanged.
    The evaluation (f32 on the GPU: top-1 against the true token t+2, loss, and the greedy acceptance of
    1..--mtp-depth chained drafts on held-out text and on the target's greedy continuations) runs after
    the export; a failure there leaves the export, the log and exit status 1.

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


def check_grouped_experts(m0, dev, E: int, K: int, H: int, fh) -> bool:
    """grouped_experts_forward on experts module m0 (its weights must require grad) against a plain gather
    reference, forward and backward. True when it may be used."""
    import torch

    hs = torch.randn(300, H, device=dev)
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
    return use_fast


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
# MTP head (--mtp-from DIR): train only a multi-token-prediction head on top of the frozen, shipped
# model and add it to the model folder. The head is make_goldens.make_mtp_head (vLLM qwen3_next_mtp.py's
# computation on transformers' own decoder layer): row p reads t_{p+1} and the target's final-norm
# hidden state h_p and predicts t_{p+2}.
# ----------------------------------------------------------------------------------------------

MTP_KEEP_OUT = ("model.safetensors", "config.json", "README.md")  # the files --mtp-from rewrites
MTP_GREEDY_DEADLINE_S = 400  # no greedy-continuation evaluation after this (tools/gpu_run.sh gives the step 540 s)


def set_experts_impl(module, impl: str) -> None:
    """Set transformers' experts implementation on every config object reachable from `module`."""
    seen = set()
    for m in module.modules():
        c = getattr(m, "config", None)
        if c is not None and id(c) not in seen:
            seen.add(id(c))
            c._experts_implementation = impl  # transformers 5: a config property read by every experts module


def mtp_target_config(dir_path: str) -> dict:
    """DIR's config.json as a model_config() dict (quantisation blocks off, training-only keys back)."""
    cfg = json.load(open(os.path.join(dir_path, "config.json")))
    for k in ("quantization", "quantization_config"):
        cfg.pop(k, None)
    cfg.update({"router_aux_loss_coef": 0.01, "output_router_logits": False, "initializer_range": 0.02})
    return cfg


def mtp_shipped_target(dir_path: str, param_names: set) -> dict:
    """The shipped weights of DIR as transformers parameter names (f32), through make_goldens' reader."""
    stored, _ = mg.read_safetensors(os.path.join(dir_path, "model.safetensors"))
    if any(n.startswith("mtp.") for n in stored):
        raise SystemExit(f"[train_tiny] {dir_path}/model.safetensors already holds mtp.* tensors")
    qblock = json.load(open(os.path.join(dir_path, "config.json")))["quantization"]
    hf = mg.mlx_to_hf_names("qwen3_next", mg.read_mlx_checkpoint(stored, qblock))
    mem = mg.hf_to_mem("qwen3_next", hf, param_names)
    assert set(mem) == set(param_names), sorted(set(mem) ^ set(param_names))[:8]
    return mem


def export_mtp(head_params: dict, dir_path: str, out_dir: str, bits: int, gs: int) -> tuple[dict, dict]:
    """head_params: {checkpoint name (mtp.*): f32 array}. Writes OUT/model.safetensors (DIR's tensors as
    stored, plus the head in the mlx-lm layout, quantised as the rest), OUT/config.json (DIR's, plus the
    head's per-module overrides in both quantisation blocks) and copies DIR's other files except README.md.
    Reads the file back: DIR's tensors must be byte-identical, and the head is returned as stored
    (dequantised f32, checkpoint names), with a description of the export. numpy only."""
    import shutil

    assert os.path.realpath(dir_path) != os.path.realpath(out_dir), "--out must differ from --mtp-from"
    os.makedirs(out_dir, exist_ok=True)
    hf = mg.mem_to_hf("qwen3_next", head_params)
    hf_rounded = {n: mg.round_bf16(a) for n, a in hf.items()}
    mlx = mg.hf_to_mlx_names("qwen3_next", hf_rounded)
    assert all(n.startswith("mtp.") for n in mlx), [n for n in mlx if not n.startswith("mtp.")][:4]
    head_stored, qb = mg.build_mlx_checkpoint("qwen3_next", mlx, bits, gs, ())

    base_stored, base_meta = mg.read_safetensors(os.path.join(dir_path, "model.safetensors"))
    cfg = json.load(open(os.path.join(dir_path, "config.json")))
    for k in ("group_size", "bits", "mode"):
        assert cfg["quantization"].get(k) == qb[k], (k, cfg["quantization"].get(k), qb[k])
    overrides = {k: v for k, v in qb.items() if k not in ("group_size", "bits", "mode")}
    assert not set(head_stored) & set(base_stored)
    mg.write_safetensors(os.path.join(out_dir, "model.safetensors"), {**base_stored, **head_stored}, base_meta or None)
    for key in ("quantization", "quantization_config"):
        if key in cfg:
            cfg[key].update(overrides)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=4)
        f.write("\n")
    for fn in sorted(os.listdir(dir_path)):
        src = os.path.join(dir_path, fn)
        if fn not in MTP_KEEP_OUT and os.path.isfile(src):
            shutil.copyfile(src, os.path.join(out_dir, fn))

    back, meta = mg.read_safetensors(os.path.join(out_dir, "model.safetensors"))
    assert meta == base_meta, (meta, base_meta)
    assert set(back) == set(base_stored) | set(head_stored)
    for n, (dt, a) in base_stored.items():
        dt2, a2 = back[n]
        assert dt2 == dt and a2.shape == a.shape and a2.tobytes() == a.tobytes(), f"{n} changed"
    head_back = {n: v for n, v in back.items() if n.startswith("mtp.")}
    back_hf = mg.mlx_to_hf_names("qwen3_next", mg.read_mlx_checkpoint(head_back, cfg["quantization"]))
    shipped = mg.hf_to_mem("qwen3_next", back_hf, set(head_params))
    assert set(shipped) == set(head_params), sorted(set(shipped) ^ set(head_params))[:8]
    for n, a in shipped.items():
        assert a.shape == head_params[n].shape, (n, a.shape, head_params[n].shape)
    info = {
        "bits": bits,
        "group_size": gs,
        "per_module_overrides": overrides,
        "mtp_tensors": len(head_stored),
        "mtp_bytes": int(sum(a.nbytes for _, a in head_stored.values())),
        "mtp_parameters": int(sum(a.size for a in head_params.values())),
        "model_safetensors_bytes": os.path.getsize(os.path.join(out_dir, "model.safetensors")),
        "base_tensors_byte_identical": True,
        "max_abs_quantisation_error": {n: float(np.abs(shipped[n] - head_params[n]).max()) for n in sorted(shipped)},
    }
    return shipped, info


def mtp_load_head(head, mem: dict) -> None:
    import torch

    cp = head.checkpoint_parameters()
    assert set(cp) == set(mem), sorted(set(cp) ^ set(mem))[:8]
    with torch.no_grad():
        for n, p in cp.items():
            assert tuple(p.shape) == mem[n].shape, (n, tuple(p.shape), mem[n].shape)
            p.copy_(torch.from_numpy(np.ascontiguousarray(mem[n], dtype=np.float32)))


def expert_spread(counts) -> dict:
    """Routing spread of one router from its per-expert assignment counts."""
    c = np.sort(np.asarray(counts, dtype=np.float64))[::-1]
    tot = max(c.sum(), 1.0)
    return {
        "experts_covering_90pct": int(np.searchsorted(np.cumsum(c) / tot, 0.9) + 1),
        "unused_experts": int((c == 0).sum()),
        "max_expert_load_share": float(c[0] / tot),
    }


def mtp_train(args, target, head, train_ids, held_ids, fh) -> dict:
    """Trains head's parameters (target frozen): CE of row p's logits against t_{p+2}, plus aux_coef x a
    Switch-style load-balancing loss on the head's router (E * sum_e frac_e * mean prob_e; top-k
    balanced = k, transformers' normalisation). AdamW, warm-up then cosine to 10 % over whichever ends
    first, --mtp-steps or --mtp-max-seconds. bf16 autocast; the target's hidden states under no_grad."""
    import torch
    import torch.nn.functional as F

    dev = next(head.parameters()).device
    tm = mg.text_model_of(target)
    cfg = target.config
    E, K, H, V = cfg.num_experts, cfg.num_experts_per_tok, cfg.hidden_size, cfg.vocab_size
    params = head.checkpoint_parameters()
    decay, no_decay = [], []
    for n, p in params.items():
        (no_decay if p.ndim < 2 or "norm" in n else decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.mtp_lr, betas=(0.9, 0.95), eps=1e-8, fused=True)

    def lr_at(step, elapsed):
        if step < args.mtp_warmup:
            return args.mtp_lr * (step + 1) / args.mtp_warmup
        p = max((step - args.mtp_warmup) / max(1, args.mtp_steps - args.mtp_warmup), elapsed / args.mtp_max_seconds)
        return args.mtp_lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, p))))

    gate = head.block.layers[0].mlp.gate
    cap = {}
    hook = gate.register_forward_hook(lambda _m, inp, _out: cap.__setitem__("x", inp[0]))

    def router_aux():
        x = cap.pop("x").reshape(-1, H)
        probs = torch.softmax(F.linear(x, gate.weight).float(), dim=-1)  # [T, E], the router's own softmax
        idx = probs.topk(K, dim=-1).indices
        cnt = torch.bincount(idx.reshape(-1), minlength=E).float()
        return E * ((cnt / probs.shape[0]) * probs.mean(0)).sum(), cnt

    S, B = args.seq, args.batch
    g = torch.Generator(device="cpu").manual_seed(SEED)
    train_gpu = train_ids.to(dev)
    n_tok = train_gpu.numel()
    n_val = len(held_ids) // (S + 1)
    val = torch.tensor(held_ids[: n_val * (S + 1)], dtype=torch.long, device=dev).view(n_val, S + 1)[:32]

    def batch_loss(x):
        """x [b, S+1] -> (MTP CE summed over rows 0..S-2, correct top-1 count, rows, aux, counts)."""
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            h = tm(input_ids=x[:, :S], use_cache=False).last_hidden_state  # the final norm's output = h_p
        with torch.autocast("cuda", dtype=torch.bfloat16):
            _, logits = head(x[:, 1:S], h[:, : S - 1])  # rows p = 0..S-2
            aux, cnt = router_aux()
        lab = x[:, 2:]
        ce = F.cross_entropy(logits.float().reshape(-1, V), lab.reshape(-1), reduction="sum")
        correct = (logits.argmax(-1) == lab).sum()
        return ce, correct, lab.numel(), aux, cnt

    def held_loss():
        head.eval()
        tot, ok, n = 0.0, 0, 0
        with torch.no_grad():
            for i in range(0, val.shape[0], 16):
                ce, c, rows, _, _ = batch_loss(val[i : i + 16])
                tot, ok, n = tot + ce.item(), ok + c.item(), n + rows
        head.train()
        return tot / n, ok / n

    head.train()
    curve, cnt_acc = [], torch.zeros(E, device=dev)
    t0 = time.time()
    step, stopped_by = 0, "steps"
    while step < args.mtp_steps:
        el = time.time() - t0
        if el > args.mtp_max_seconds:
            stopped_by = "time"
            break
        for gp in opt.param_groups:
            gp["lr"] = lr_at(step, el)
        starts = torch.randint(0, n_tok - S - 1, (B,), generator=g)
        x = torch.stack([train_gpu[s : s + S + 1] for s in starts.tolist()]).long()
        ce, _, rows, aux, cnt = batch_loss(x)
        mtp_loss = ce / rows
        loss = mtp_loss + args.mtp_aux_coef * aux
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(list(params.values()), 1.0)
        opt.step()
        cnt_acc += cnt
        if step % 25 == 0 or step == args.mtp_steps - 1:
            el = time.time() - t0
            spread = expert_spread(cnt_acc.cpu().numpy())
            cnt_acc.zero_()
            rec = {"step": step, "s": round(el, 1), "lr": lr_at(step, el), "loss": mtp_loss.item(), "aux": aux.item(),
                   "gnorm": gn.item(), "tok_per_s": (step + 1) * B * S / el, "router": spread}
            if step % args.eval_every == 0:
                rec["heldout_loss"], rec["heldout_top1"] = held_loss()
            curve.append(rec)
            log("mtp step {step:5d} {s:6.1f}s lr {lr:.2e} loss {loss:.4f} aux {aux:.3f} gnorm {gnorm:.2f} "
                "{tok_per_s:.0f} tok/s".format(**rec) + f" router 90%-cover {spread['experts_covering_90pct']}/{E} "
                f"max share {spread['max_expert_load_share']:.3f}"
                + (f" heldout {rec['heldout_loss']:.4f} top1 {rec['heldout_top1']:.4f}" if "heldout_loss" in rec else ""), fh)
        step += 1
    train_s = time.time() - t0
    final_loss, final_top1 = held_loss()  # before the hook goes: router_aux reads what it captures
    hook.remove()
    cap.clear()
    curve.append({"step": step, "s": round(train_s, 1), "heldout_loss": final_loss, "heldout_top1": final_top1})
    log(f"mtp trained {step} steps ({step * B * S} tokens) in {train_s:.0f}s (stopped by {stopped_by}); held-out "
        f"MTP loss (bf16 autocast, {val.shape[0]}x{S}) {final_loss:.4f} top1 {final_top1:.4f}", fh)
    return {"steps": step, "stopped_by": stopped_by, "train_seconds": train_s, "tokens": step * B * S,
            "heldout_loss_bf16": final_loss, "heldout_top1_bf16": final_top1, "heldout_windows": int(val.shape[0]),
            "curve": curve}


class MtpEval:
    """The head against the target on windows of text, PyTorch f32 (eager attention, transformers' eager
    experts), no_grad. Row p of a window x [C] is fed x[p+1] and the target's h_p; its draft d1(p) is
    scored against the true x[p+2] and against the target's greedy token argmax logits[p+1]. Chained
    drafts (positions P = [C/2-1, C-1-depth]): row p+j-1 is fed the draft d_{j-1} and the head's own
    output at row p+j-2, at RoPE position p+j-1, and attends to the teacher-forced rows 0..p and the
    chain; d_j is accepted when d_1..d_{j-1} were and d_j == argmax target logits[p+j]."""

    def __init__(self, target, head, depth: int, fh):
        self.target, self.head, self.depth, self.fh = target, head, depth, fh
        self.tm = mg.text_model_of(target)
        self.dev = next(head.parameters()).device
        self.E = target.config.num_experts
        self.counts = np.zeros(self.E, dtype=np.int64)
        self.count_routing = False
        head.block.layers[0].mlp.gate.register_forward_hook(self._gate_hook)

    def _gate_hook(self, _m, _inp, out):
        if self.count_routing:
            self.counts += np.bincount(out[2].reshape(-1).cpu().numpy(), minlength=self.E)

    def target_pass(self, X, chunk: int = 32):
        """X [N, C] -> (h [N, C, H] the final norm's output, g [N, C] greedy tokens, lm_head(h) vs logits max diff)."""
        import torch

        cap = {}
        hk = self.tm.norm.register_forward_hook(
            lambda _m, _i, o: cap.__setitem__("h", (o[0] if isinstance(o, tuple) else o).detach()))
        hs, gs, relogit = [], [], 0.0
        with torch.no_grad():
            for i in range(0, X.shape[0], chunk):
                lg = self.target(input_ids=X[i : i + chunk], use_cache=False).logits.float()
                h = cap.pop("h").float()
                relogit = max(relogit, (self.target.lm_head(h).float() - lg).abs().max().item())
                hs.append(h)
                gs.append(lg.argmax(-1))
        hk.remove()
        return torch.cat(hs), torch.cat(gs), relogit

    def head_rows(self, head, X, Hs, chunk: int = 16):
        """Teacher-forced rows 0..C-2: (out [N, C-1, H], d1 [N, C-1], nll [N, C-2] of x[p+2])."""
        import torch

        outs, ds, nlls = [], [], []
        with torch.no_grad():
            for i in range(0, X.shape[0], chunk):
                o, lg = head(X[i : i + chunk, 1:], Hs[i : i + chunk, :-1])
                lp = torch.log_softmax(lg.float(), dim=-1)
                lab = X[i : i + chunk, 2:]
                nlls.append(-lp[:, :-1].gather(-1, lab[..., None])[..., 0])
                outs.append(o.float())
                ds.append(lg.argmax(-1))
        return torch.cat(outs), torch.cat(ds), torch.cat(nlls)

    def chain(self, X, Hs, out1, d1, g, P, rows_per_call: int = 16384):
        """Chained drafts for every (window, p in P). Returns accepted [depth, N*|P|] (bool, cumulative)
        and the drafts [depth, N*|P|]."""
        import torch

        N, C = X.shape
        nn_ = torch.arange(N, device=self.dev).repeat_interleave(len(P))
        pp = torch.tensor(P, device=self.dev).repeat(N)
        M = nn_.numel()
        d = [d1[nn_, pp]]
        o = [out1[nn_, pp]]
        acc = [d[0] == g[nn_, pp + 1]]
        cs = max(1, rows_per_call // (C - 1))
        with torch.no_grad():
            for j in range(2, self.depth + 1):
                dj = torch.empty(M, dtype=torch.long, device=self.dev)
                oj = torch.empty(M, out1.shape[-1], device=self.dev)
                for a in range(0, M, cs):
                    ci = torch.arange(a, min(M, a + cs), device=self.dev)
                    L = int(pp[ci].max().item()) + j  # rows 0..p+j-1 are all this draft needs
                    ids = X[nn_[ci], 1 : L + 1].clone()
                    hid = Hs[nn_[ci], :L].clone()
                    ar = torch.arange(ci.numel(), device=self.dev)
                    for i in range(1, j):  # chain rows p+1 .. p+j-1
                        ids[ar, pp[ci] + i] = d[i - 1][ci]
                        hid[ar, pp[ci] + i] = o[i - 1][ci]
                    out, lg = self.head(ids, hid)
                    r = pp[ci] + j - 1
                    oj[ci] = out[ar, r].float()
                    dj[ci] = lg[ar, r].argmax(-1)
                d.append(dj)
                o.append(oj)
                acc.append(acc[-1] & (dj == g[nn_, pp + j]))
        self._chain_check(X, Hs, nn_, pp, d, o)
        return torch.stack(acc), torch.stack(d)

    def _chain_check(self, X, Hs, nn_, pp, d, o):
        """A few chains again one sequence at a time through the head's unbatched call (mtp_reference's
        loop): the drafts must agree with the batched bookkeeping."""
        import torch

        worst, agree, n = 0.0, 0, 0
        with torch.no_grad():
            for k in np.linspace(0, nn_.numel() - 1, 6).astype(int).tolist():
                n_, p = int(nn_[k]), int(pp[k])
                toks = X[n_, 1 : p + 2].clone()
                hid = Hs[n_, : p + 1].clone()
                for j in range(1, self.depth + 1):
                    out, lg = self.head(toks, hid)
                    agree += int(int(lg[-1].argmax()) == int(d[j - 1][k]))
                    worst = max(worst, (out[-1].float() - o[j - 1][k]).abs().max().item())
                    n += 1
                    toks = torch.cat([toks, lg[-1].argmax()[None]])
                    hid = torch.cat([hid, out[-1:].float()])
        log(f"mtp chain check (unbatched vs batched): drafts agree {agree}/{n}, max |out diff| {worst:.2e}", self.fh)
        self.chain_check = {"drafts_agree": agree, "drafts": n, "max_abs_out_diff": worst}

    def evaluate(self, X, label: str, chain: bool = True, head=None) -> dict:
        """All numbers for windows X [N, C] (long, on the device)."""
        head = head or self.head
        t0 = time.time()
        N, C = X.shape
        D = self.depth
        lo, hi = C // 2 - 1, min(C - 3, C - 1 - D)  # the scored half; every row has its true t+2 and D drafts
        P = list(range(lo, hi + 1))
        Hs, g, relogit = self.target_pass(X)
        self.count_routing = head is self.head
        out1, d1, nll = self.head_rows(head, X, Hs)
        self.count_routing = False
        sc = slice(lo, hi + 1)
        true_ok = (d1[:, : C - 2] == X[:, 2:]).float()  # rows 0..C-3
        greedy_ok = (d1[:, : C - 2] == g[:, 1 : C - 1]).float()
        target_ok = (g[:, : C - 1] == X[:, 1:]).float()  # the target's own next-token top-1
        res = {
            "windows": N, "ctx": C, "lm_head_of_hooked_hidden_vs_logits_max_abs_diff": relogit,
            "all_rows": {"rows": int(true_ok.numel()), "definition": "rows p = 0..C-3 of every window",
                         "top1_vs_true_next_next": true_ok.mean().item(), "loss": nll.mean().item(),
                         "accept_vs_target_greedy": greedy_ok.mean().item()},
            "scored_rows": {"rows": int(true_ok[:, sc].numel()),
                            "definition": f"rows p = {lo}..{hi} of every window (the scored half of "
                                          "reference_perplexity.json's windows, each with its chained drafts)",
                            "top1_vs_true_next_next": true_ok[:, sc].mean().item(),
                            "loss": nll[:, sc].mean().item(),
                            "accept_vs_target_greedy": greedy_ok[:, sc].mean().item(),
                            "target_top1_vs_true_next": target_ok[:, sc].mean().item()},
        }
        if chain:
            acc, _ = self.chain(X, Hs, out1, d1, g, P)
            a = acc.float().mean(1).tolist()  # a[j-1] = P(drafts 1..j all accepted)
            res["chain"] = {
                "positions": f"p = {P[0]}..{P[-1]} of every window ({len(P)} per window, {acc.shape[1]} in all)",
                "accepted_all_of_first_j_drafts": {str(j + 1): a[j] for j in range(D)},
                "conditional_accept_of_draft_j": {str(j + 1): (a[j] / a[j - 1] if j and a[j - 1] > 0 else a[j])
                                                  for j in range(D)},
                "expected_tokens_per_verify_step": {str(k): 1.0 + sum(a[:k]) for k in range(1, D + 1)},
                "unbatched_check": self.chain_check,
            }
        res["seconds"] = round(time.time() - t0, 1)
        log(f"mtp eval {label}: " + json.dumps({k: v for k, v in res.items() if k != "chain"})
            + (" chain " + json.dumps(res["chain"]["accepted_all_of_first_j_drafts"]) + " tokens/step "
               + json.dumps(res["chain"]["expected_tokens_per_verify_step"]) if "chain" in res else ""), self.fh)
        return res

    def greedy_continue(self, prompts, n_new: int, chunk: int = 128):
        """The target's greedy continuation (full forward per token, f32, no stop token)."""
        import torch

        outs = []
        with torch.no_grad():
            for i in range(0, prompts.shape[0], chunk):
                seq = prompts[i : i + chunk]
                for _ in range(n_new):
                    h = self.tm(input_ids=seq, use_cache=False).last_hidden_state[:, -1]
                    seq = torch.cat([seq, self.target.lm_head(h).argmax(-1)[:, None]], dim=1)
                outs.append(seq)
        return torch.cat(outs)


def mtp_readme_section(stats: dict) -> str:
    t, ex, cmd = stats["training"], stats["export"], stats["command"]
    v = stats["versions"]
    lines = [
        "## MTP head",
        "",
        "`model.safetensors` also holds a multi-token-prediction head, stored as a Qwen3-Next checkpoint stores "
        "it (`mtp.fc` [256, 512] over [pre_fc_norm_embedding(embed(t+1)); pre_fc_norm_hidden(h_t)], one "
        "gated full-attention MoE decoder layer `mtp.layers.0`, `mtp.norm`; embedding and lm_head are the main "
        "model's) in this folder's layout: 4-bit g64, `mlp.gate` and `mlp.shared_expert_gate` 8-bit g64 "
        "(overrides in `config.json`), stacked `mtp.layers.0.mlp.switch_mlp` experts, +1 folded into its norms "
        f"({ex['mtp_parameters']:,} parameters, {ex['mtp_bytes']:,} bytes; the main model's tensors are "
        "byte-identical to the model without the head). Row t reads token t+1 and h_t, the main model's "
        "final-norm output, and proposes token t+2 (vLLM `qwen3_next_mtp.py`; `make_mtp_head` in "
        "`tools/make_goldens.py`).",
        "",
        f"Trained afterwards with the main model frozen: `{cmd}` on one {stats['device']} (torch {v['torch']}, "
        f"transformers {v['transformers']}), seed {SEED}; the same training text (the corpus rebuilt by the same "
        "procedure, tokenised with this tokenizer). Target = the shipped 4-bit weights dequantised to f32. The "
        f"head started from layer {t['warm_start']['layer_from']} (the last full-attention layer) and the final "
        "norm, `fc` = [N(0, 0.02) | identity]. Loss: cross-entropy of row t against token t+2, plus "
        f"{t['aux_coef']} x a Switch load-balancing loss on the head's router; AdamW beta (0.9, 0.95), weight "
        f"decay 0.1 on matrices, peak LR {t['lr']:g}, {t['warmup']} warm-up steps then cosine to 10 % (over the "
        "steps or the time budget, whichever ends first), clip 1.0, bf16 autocast, batch "
        f"{t['batch']} x {t['seq']}: {t['steps']} steps ({t['tokens'] / 1e6:.1f} M tokens) in {t['train_seconds']:.0f} s. "
        "`mtp_stats.json` has every number below and the training curve; `mtp_training_log.txt` the run's log.",
    ]
    ev = stats.get("eval", {})
    held, gr = ev.get("heldout_text"), ev.get("greedy_continuations")
    if held:
        def col(r, key, sub=None):
            if r is None:
                return "–"
            x = r["scored_rows"].get(key) if sub is None else r["chain"][key]
            return f"{x:.3f}" if sub is None else " / ".join(f"{x[str(j)]:.3f}" for j in sub)

        D = len(held["chain"]["accepted_all_of_first_j_drafts"])
        lines += [
            "",
            f"Measured (shipped 4-bit head and main model, PyTorch f32 on the GPU; `heldout.txt` cut as "
            f"`reference_perplexity.json` cuts it, {held['windows']} windows of {held['ctx']} tokens, rows t = "
            f"{held['ctx'] // 2 - 1}..{min(held['ctx'] - 3, held['ctx'] - 1 - D)} of each):",
            "",
            "| | held-out text | greedy continuations |",
            "|---|---|---|",
            f"| head top-1 = true token t+2 | {col(held, 'top1_vs_true_next_next')} | – |",
            f"| head loss (nats) | {col(held, 'loss')} | – |",
            f"| draft = the main model's greedy token (k = 1) | {col(held, 'accept_vs_target_greedy')} | "
            f"{col(gr, 'accept_vs_target_greedy')} |",
            f"| drafts 1..j all accepted, j = 1..{D} | {col(held, 'accepted_all_of_first_j_drafts', range(1, D + 1))} | "
            f"{col(gr, 'accepted_all_of_first_j_drafts', range(1, D + 1))} |",
            f"| tokens per verify step with k = 1..{D} drafts | "
            f"{col(held, 'expected_tokens_per_verify_step', range(1, D + 1))} | "
            f"{col(gr, 'expected_tokens_per_verify_step', range(1, D + 1))} |",
            "",
            f"The main model's own greedy token is the true next token for "
            f"{held['scored_rows']['target_top1_vs_true_next']:.3f} of these positions. On held-out text the "
            "chained drafts are verified against the main model's greedy tokens on the real text (teacher-forced, "
            "a proxy beyond the first draft)",
        ]
        if gr:
            lines[-1] += (
                f"; the greedy continuations (the first {gr['ctx'] // 2} tokens of {gr['windows']} windows as "
                f"prompts, {gr['ctx'] - gr['ctx'] // 2} greedy tokens of the main model, drafts from the same rows, "
                "i.e. all inside the generated part) give exactly what greedy speculative decoding with this head accepts, "
                "inflated by this small model's loops."
            )
        else:
            lines[-1] += "."
    if "error" in ev:
        lines += ["", f"The evaluation stopped with `{ev['error']}` (see `mtp_training_log.txt`)."]
    return "\n".join(lines) + "\n"


def mtp_write_outputs(args, stats: dict, fh) -> None:
    with open(os.path.join(args.out, "mtp_stats.json"), "w") as f:
        json.dump(stats, f, indent=1)
    base = open(os.path.join(args.mtp_from, "README.md"), encoding="utf-8", newline="").read()
    with open(os.path.join(args.out, "README.md"), "w", encoding="utf-8", newline="") as f:
        f.write(base.rstrip("\n") + "\n\n" + mtp_readme_section(stats))
    fh.flush()
    if args.pack_dir:
        pack(args.out, args.pack_dir)


def mtp_main(args) -> int:
    import shlex

    import torch
    import tokenizers
    import transformers
    from tokenizers import Tokenizer

    os.makedirs(args.out, exist_ok=True)
    if args.pack_dir:
        os.makedirs(args.pack_dir, exist_ok=True)
    fh = open(os.path.join(args.out, "mtp_training_log.txt"), "w")
    dev = torch.device("cuda")
    versions = {"torch": torch.__version__, "transformers": transformers.__version__,
                "tokenizers": tokenizers.__version__, "numpy": np.__version__, "python": sys.version.split()[0]}
    device_name = torch.cuda.get_device_name(0)
    log(f"MTP head for {args.mtp_from}: {versions} device {device_name}", fh)
    log(f"args {vars(args)}", fh)
    np.random.seed(SEED)
    torch.manual_seed(SEED)
    secs = {}
    gdn_changes = mg.force_torch_gdn("qwen3_next", mg.CallCounter())
    log(f"GDN kernels: {gdn_changes}", fh)

    # 1. the corpus as the original run built it, tokenised with DIR's tokenizer
    t1 = time.time()
    train_docs, held_docs, _ = collect_corpus(
        int(args.max_data_mb * 1e6), int(args.per_package_mb * 1e6), int(args.heldout_kb * 1e3), fh
    )
    held_text = open(os.path.join(args.mtp_from, "heldout.txt"), encoding="utf-8", newline="").read()  # keeps its CRLFs
    rebuilt = "\n".join(t if t.endswith("\n") else t + "\n" for _, t in held_docs)
    same_heldout = rebuilt == held_text
    n_before = len(train_docs)
    if not same_heldout:  # another package set: keep every shipped held-out file out of training
        train_docs = [(k, t) for k, t in train_docs if t not in held_text]
    log(f"rebuilt held-out text identical to {args.mtp_from}/heldout.txt: {same_heldout}; train files "
        f"{len(train_docs)} (dropped {n_before - len(train_docs)} found in heldout.txt)", fh)
    tok = Tokenizer.from_file(os.path.join(args.mtp_from, "tokenizer.json"))
    eot = tok.token_to_id("<|endoftext|>")
    stream = []
    for e in tok.encode_batch([t for _, t in train_docs], add_special_tokens=False):
        stream.extend(e.ids)
        stream.append(eot)
    train_ids = torch.tensor(stream, dtype=torch.int32)
    held_ids = tok.encode(held_text, add_special_tokens=False).ids
    try:
        shipped_train_tokens = json.load(open(os.path.join(args.mtp_from, "data_manifest.json")))["train_tokens"]
    except (OSError, KeyError, ValueError):
        shipped_train_tokens = None
    log(f"tokens: train {len(stream)} (the shipped run: {shipped_train_tokens}), held-out {len(held_ids)}", fh)
    secs["corpus_and_tokens"] = round(time.time() - t1, 1)

    # 2. the frozen target: DIR's 4-bit weights through make_goldens' reader
    t1 = time.time()
    cfg_dict = mtp_target_config(args.mtp_from)
    target = make_model(cfg_dict, "sdpa")
    target_mem = mtp_shipped_target(args.mtp_from, {n for n, _ in target.named_parameters()})
    load_weights(target, target_mem)
    target = target.to(dev).eval()
    for p in target.parameters():
        p.requires_grad_(False)
    tm = mg.text_model_of(target)
    E, K, H = cfg_dict["num_experts"], cfg_dict["num_experts_per_tok"], cfg_dict["hidden_size"]

    # 3. the head, warm-started
    torch.manual_seed(SEED)
    head = mg.make_mtp_head(target, target.config).to(dev)
    head.block.embed_tokens.weight.requires_grad_(False)  # unused: the head reads the target's embedding
    full = [i for i, t in enumerate(tm.config.layer_types) if t == "full_attention"]
    src = full[-1]
    head.block.layers[0].load_state_dict(tm.layers[src].state_dict())
    head.block.norm.load_state_dict(tm.norm.state_dict())
    gen = torch.Generator(device="cpu").manual_seed(SEED)
    w = torch.zeros(H, 2 * H)
    w[:, :H].normal_(0.0, 0.02, generator=gen)  # embedding half: small
    w[:, H:] = torch.eye(H)  # hidden half: identity
    with torch.no_grad():
        head.fc.weight.copy_(w)
    n_head = sum(p.numel() for p in head.checkpoint_parameters().values())
    log(f"head: {n_head} parameters; mtp.layers.0 from target layer {src} ({tm.config.layer_types[src]}), mtp.norm "
        f"from the final norm, fc = [N(0, 0.02) | I]", fh)
    head_exp = head.block.layers[0].mlp.experts
    tgt_exp = [m for m in target.modules() if type(m).__name__ == "Qwen3NextExperts"]
    use_fast = check_grouped_experts(head_exp, dev, E, K, H, fh)
    if use_fast:
        for m in tgt_exp + [head_exp]:
            m.forward = types.MethodType(grouped_experts_forward, m)
    else:
        set_experts_impl(target, "eager")
        set_experts_impl(head, "eager")
        log("training with transformers' eager per-expert loop under autocast", fh)
    secs["load"] = round(time.time() - t1, 1)

    # 4. train
    tr = mtp_train(args, target, head, train_ids, held_ids, fh)
    for m in tgt_exp + [head_exp]:
        m.__dict__.pop("forward", None)

    # 5. export (and pack right away: the evaluation must not lose it)
    t1 = time.time()
    master = {n: p.detach().float().cpu().numpy().copy() for n, p in head.checkpoint_parameters().items()}
    shipped, ex = export_mtp(master, args.mtp_from, args.out, bits=4, gs=64)
    log(f"exported: {ex['mtp_tensors']} mtp tensors, {ex['mtp_bytes']} bytes; model.safetensors "
        f"{ex['model_safetensors_bytes']} bytes; DIR's tensors byte-identical", fh)
    secs["export"] = round(time.time() - t1, 1)
    cmd = "python3 tools/train_tiny.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    stats = {
        "what": "multi-token-prediction head (mtp.*) trained on the frozen shipped model; see README.md 'MTP head'",
        "command": cmd, "versions": versions, "device": device_name, "seed": SEED, "seconds": secs,
        "data": {"train_files": len(train_docs), "train_tokens": len(stream), "shipped_run_train_tokens": shipped_train_tokens,
                 "heldout_tokens": len(held_ids), "rebuilt_heldout_identical": same_heldout},
        "training": {
            "target": f"{args.mtp_from} shipped MLX 4-bit weights dequantised to f32 (make_goldens reader), frozen",
            "loss": "cross-entropy of head logits at row p against token p+2 (rows 0..seq-2 of each window) "
                    "+ aux_coef * E * sum_e(frac_e * mean_prob_e) on the head's router",
            "warm_start": {"layer_from": src, "norm_from": "model.norm", "fc": "[N(0, 0.02) | identity]"},
            "optimizer": "AdamW betas (0.9, 0.95) eps 1e-8, weight decay 0.1 on matrices, clip 1.0, bf16 autocast",
            "schedule": "linear warm-up, then cosine to 10 % over max(step / steps, seconds / max_seconds)",
            "lr": args.mtp_lr, "warmup": args.mtp_warmup, "max_steps": args.mtp_steps,
            "max_seconds": args.mtp_max_seconds, "aux_coef": args.mtp_aux_coef, "batch": args.batch, "seq": args.seq,
            "grouped_gemm_experts": use_fast, **tr,
        },
        "export": ex,
    }
    mtp_write_outputs(args, stats, fh)
    secs["until_export"] = round(time.time() - T_START, 1)

    # 6. evaluation (f32 on the GPU); a failure keeps the export and says so
    t1 = time.time()
    stats["eval"] = {}
    try:
        torch.set_float32_matmul_precision("highest")
        try:
            torch.backends.cudnn.allow_tf32 = False  # the DeltaNet's depthwise conv1d
        except Exception as e:  # noqa: BLE001
            log(f"cudnn.allow_tf32 not set ({type(e).__name__}: {e})", fh)
        evm = make_model(cfg_dict, "eager")
        load_weights(evm, target_mem)
        evm = evm.to(dev).eval()
        set_experts_impl(evm, "eager")
        head_e = mg.make_mtp_head(evm, evm.config)
        mtp_load_head(head_e, shipped)
        head_e = head_e.to(dev).eval()
        set_experts_impl(head_e, "eager")
        ev = MtpEval(evm, head_e, args.mtp_depth, fh)
        C = args.ctx
        n_win = len(held_ids) // C
        if args.mtp_eval_windows > 0:
            n_win = min(n_win, args.mtp_eval_windows)
        X = torch.tensor(held_ids[: n_win * C], dtype=torch.long, device=dev).view(n_win, C)
        stats["eval"]["compute"] = ("PyTorch f32 on the GPU (matmul precision highest), eager attention, transformers' "
                                    "eager experts; shipped (dequantised) head and target")
        stats["eval"]["routing_of_head_on_heldout"] = None
        stats["eval"]["heldout_text"] = ev.evaluate(X, "heldout text")
        stats["eval"]["routing_of_head_on_heldout"] = expert_spread(ev.counts)
        log(f"head routing on held-out: {stats['eval']['routing_of_head_on_heldout']}", fh)
        mtp_write_outputs(args, stats, fh)
        head_m = mg.make_mtp_head(evm, evm.config)
        mtp_load_head(head_m, master)
        head_m = head_m.to(dev).eval()
        set_experts_impl(head_m, "eager")
        stats["eval"]["heldout_text_f32_master_head"] = ev.evaluate(X, "heldout text, f32 master head", chain=False,
                                                                    head=head_m)
        del head_m
        n_pr = min(args.mtp_greedy_prompts, n_win)
        if time.time() - T_START > MTP_GREEDY_DEADLINE_S:
            raise TimeoutError(f"greedy continuations skipped: {time.time() - T_START:.0f}s > {MTP_GREEDY_DEADLINE_S}s")
        t2 = time.time()
        Xg = ev.greedy_continue(X[:n_pr, : C // 2], C - C // 2)
        log(f"greedy continuations: {n_pr} x {C - C // 2} tokens in {time.time() - t2:.0f}s", fh)
        res = ev.evaluate(Xg, "greedy continuations")
        _, g2, _ = ev.target_pass(Xg)
        res["greedy_consistency"] = (g2[:, C // 2 - 1 : C - 1] == Xg[:, C // 2 :]).float().mean().item()
        stats["eval"]["greedy_continuations"] = res
    except Exception as e:  # noqa: BLE001
        import traceback

        stats["eval"]["error"] = f"{type(e).__name__}: {e}"
        log("evaluation FAILED (the export stands):\n" + traceback.format_exc(), fh)
    secs["eval"] = round(time.time() - t1, 1)
    secs["total"] = round(time.time() - T_START, 1)
    log(f"seconds {secs}", fh)
    mtp_write_outputs(args, stats, fh)
    log("done", fh)
    fh.close()
    if args.pack_dir:
        pack(args.out, args.pack_dir)
    return 0 if "error" not in stats["eval"] else 1


# ----------------------------------------------------------------------------------------------
# main
# ----------------------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--pack-dir", default=None)
    ap.add_argument("--chat-template-from", help="a tokenizer_config.json holding Qwen3's chat_template (required "
                    "unless --mtp-from)")
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
    ap.add_argument("--mtp-from", default=None, help="a tiny-next folder: train only an MTP head on its frozen model "
                    "and write the folder with the head added to --out")
    ap.add_argument("--mtp-steps", type=int, default=2800, help="~0.077 s a step on one H100: ~215 s")
    ap.add_argument("--mtp-max-seconds", type=float, default=240)
    ap.add_argument("--mtp-lr", type=float, default=1e-3)
    ap.add_argument("--mtp-warmup", type=int, default=50)
    ap.add_argument("--mtp-aux-coef", type=float, default=0.01)
    ap.add_argument("--mtp-depth", type=int, default=4, help="chained drafts evaluated (k = 1..depth)")
    ap.add_argument("--mtp-greedy-prompts", type=int, default=96, help="held-out windows continued greedily for the "
                    "exact greedy-decoding acceptance")
    ap.add_argument("--mtp-eval-windows", type=int, default=0, help="evaluate on the first N held-out windows only "
                    "(0: all, as reference_perplexity.json)")
    args = ap.parse_args()
    if args.mtp_from:
        return mtp_main(args)
    if not args.chat_template_from:
        ap.error("--chat-template-from is required (unless --mtp-from)")

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
    use_fast = check_grouped_experts(exp_mods[0], dev, E, K, cfg_dict["hidden_size"], fh)
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
