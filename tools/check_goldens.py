#!/usr/bin/env python3
"""check_goldens.py — an independent numpy forward pass, written from docs/models.md, checked against
the transformers goldens in tests/data/goldens.

Purpose
    The goldens come from transformers; sluice is written from the spec (shared docs/models.md). This
    script implements the spec's math directly (float32 numpy, token-by-token recurrent Gated DeltaNet,
    no transformers) and compares its logits, per-layer hidden states and the greedy-decode logits with
    each golden. Agreement shows that the spec, the checkpoint layouts and the goldens say the same thing
    before any C++ is involved.

How to run (needs only numpy)
    python3 tools/check_goldens.py [--dir tests/data/goldens] [--only NAME] [--tol 1e-4]
    Exit status 0 when every golden agrees within --tol (max abs difference of logits and hidden states;
    logits have std ~1).

Design notes
    * Layout handling (MLX dequantisation, folded +1 norms, conv transpose, expert stacking) reuses the
      reader in tools/make_goldens.py, which is the inverse of its writer; the math below does not. The
      MXFP4 experts of gpt-oss are decoded here, from the format (read_mxfp4_experts).
    * gpt-oss (attention sinks, sliding-window layers, YaRN with truncate false, biased router and experts,
      the clamped swiglu) is written from transformers' definition as stated in moe_gpt_oss / attention.
    * Goldens listed under the index's "provisional" were made by make_goldens --numpy-reference from this
      very model: they pass trivially and only prove the files read back; transformers replaces them.
    * The recurrent GDN form (models.md §3.5.6) is used for every token, while the goldens' prompt logits
      come from transformers' chunked kernel: agreement also checks chunked == recurrent.
    * Rejected alternative: comparing only argmax tokens — too weak to catch a wrong norm or gate.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("make_goldens", os.path.join(_HERE, "make_goldens.py"))
mg = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mg)


# MXFP4 (gpt-oss's Hub experts), read here from the format's definition rather than with make_goldens'
# reader: E2M1 code -> value, two codes a byte (element 2j low nibble, 2j+1 high), 32 a block sharing a
# scale byte s meaning 2^(s - 127); NAME_blocks [E, out, in/32, 16] is the transpose of the model's NAME.
_E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def read_mxfp4_experts(stored: dict) -> dict:
    out = {}
    for n, (dt, a) in stored.items():
        if n.endswith("_scales"):
            continue
        if not n.endswith("_blocks"):
            out[n] = mg.bf16_bits_to_f32(a) if dt == "BF16" else a.astype(np.float32)
            continue
        base = n[: -len("_blocks")]
        scales = stored[base + "_scales"][1].astype(np.float64)
        E, rows, nb, _ = a.shape
        nib = np.stack([a & 15, a >> 4], axis=-1).reshape(E, rows, nb, 32)  # [.., j, 0] = low nibble = element 2j
        mag = np.array(_E2M1)[nib & 7] * np.where(nib & 8, -1.0, 1.0)
        w = (mag * 2.0 ** (scales - 127.0)[..., None]).reshape(E, rows, nb * 32)
        out[base] = np.ascontiguousarray(w.transpose(0, 2, 1)).astype(np.float32)
    return out


def load_weights(gdir: str, family: str) -> dict:
    """-> f32 arrays under the HF checkpoint names (raw zero-centred norm offsets for Next/3.5)."""
    cfg = json.load(open(os.path.join(gdir, "config.json")))
    stored, _meta = mg.read_safetensors(os.path.join(gdir, "model.safetensors"))
    if (cfg.get("quantization_config") or {}).get("quant_method") == "mxfp4":
        return read_mxfp4_experts(stored)
    if "quantization" in cfg:
        w = mg.mlx_to_hf_names(family, mg.read_mlx_checkpoint(stored, cfg["quantization"]))
    else:
        w = mg.read_hf_checkpoint(stored)
    if family == "mixtral":  # block_sparse_moe.experts.E.w1/w3/w2, .gate -> the Qwen-style names used below
        w = {mg._mixtral_to_q(n): a for n, a in w.items()}
    return w


def rms(x, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)


def silu(x):
    return x / (1.0 + np.exp(-x))


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def softplus(x):
    return np.where(x > 20.0, x, np.log1p(np.exp(np.minimum(x, 20.0))))


class Model:
    def __init__(self, gdir: str, family: str):
        self.family = family
        cfg = json.load(open(os.path.join(gdir, "config.json")))
        self.c = cfg.get("text_config", cfg)
        self.w = load_weights(gdir, family)
        self.pre = "model.language_model." if family == "qwen3_5_moe" else "model."
        c = self.c
        self.zc = family in ("qwen3_next", "qwen3_5_moe")
        self.eps = c["rms_norm_eps"]
        # Qwen2's config carries no head_dim (transformers derives it as hidden / heads)
        self.hd = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
        rp = c.get("rope_parameters", {})
        self.theta = rp.get("rope_theta", c.get("rope_theta", 10000.0))
        prf = rp.get("partial_rotary_factor", c.get("partial_rotary_factor", 0.25 if self.zc else 1.0))
        self.mla = family == "deepseek_v3"
        self.rot = c["qk_rope_head_dim"] if self.mla else int(self.hd * prf)
        self.yarn = rp if rp.get("rope_type") == "yarn" else None
        if self.yarn is None and isinstance(c.get("rope_scaling"), dict) and c["rope_scaling"].get("type", c["rope_scaling"].get("rope_type")) == "yarn":
            self.yarn = c["rope_scaling"]
        n = c["num_hidden_layers"]
        if "layer_types" in c:
            self.types = c["layer_types"]
        elif family in ("qwen3_moe", "qwen3", "deepseek_v3", "glm4_moe", "qwen2_moe", "mixtral", "qwen2", "gpt_oss"):
            self.types = ["full_attention"] * n
        else:
            k = c.get("full_attention_interval", 4)
            self.types = ["full_attention" if (i + 1) % k == 0 else "linear_attention" for i in range(n)]
        # norm_topk_prob: Qwen3.5 and Mixtral always renormalise; Qwen3-MoE defaults to false, Qwen3-Next to true
        self.renorm = True if family in ("qwen3_5_moe", "mixtral") else c.get("norm_topk_prob", family in ("qwen3_next", "deepseek_v3"))

    def W(self, name):
        return self.w[name]

    def norm(self, x, name, zero_centred):
        w = self.W(name)
        return rms(x, self.eps) * ((1.0 + w) if zero_centred else w)

    def rope(self, x, pos):  # x [T, heads, hd]
        R = self.rot
        half = R // 2
        inv = self.theta ** (-(np.arange(0, R, 2, dtype=np.float64) / R))
        mscale = 1.0
        if self.yarn is not None:
            # YaRN as transformers defines it: dims with more than beta_fast rotations over the original
            # context keep their frequency, those with fewer than beta_slow are divided by the factor,
            # a linear ramp in the dim index between (the range rounded outwards unless truncate is
            # false); cos/sin scaled.
            y = self.yarn
            factor = y["factor"]
            orig = y.get("original_max_position_embeddings", self.c["max_position_embeddings"])

            def dim_of(rotations):
                return R * np.log(orig / (rotations * 2 * np.pi)) / (2 * np.log(self.theta))

            low, high = dim_of(y.get("beta_fast") or 32), dim_of(y.get("beta_slow") or 1)
            if y.get("truncate", True):  # gpt-oss: truncate false keeps the fractional ends
                low, high = np.floor(low), np.ceil(high)
            low, high = max(low, 0), min(high, R - 1)
            if low == high:
                high += 0.001
            ramp = np.clip((np.arange(half, dtype=np.float64) - low) / (high - low), 0, 1)
            inv = inv / factor * ramp + inv * (1 - ramp)
            def get_mscale(scale, m=1.0):
                return 1.0 if scale <= 1 else 0.1 * m * np.log(scale) + 1.0

            if y.get("attention_factor"):
                mscale = y["attention_factor"]
            elif y.get("mscale") and y.get("mscale_all_dim"):
                mscale = get_mscale(factor, y["mscale"]) / get_mscale(factor, y["mscale_all_dim"])
            else:
                mscale = get_mscale(factor)
        ang = pos[:, None].astype(np.float64) * inv[None, :]
        c = (np.cos(ang) * mscale).astype(np.float32)[:, None, :]
        s = (np.sin(ang) * mscale).astype(np.float32)[:, None, :]
        a, b = x[..., :half], x[..., half:R]
        return np.concatenate([a * c - b * s, b * c + a * s, x[..., R:]], axis=-1)

    def attention(self, x, p, window=None):
        """window: a sliding layer's span (query at P sees keys P-window+1..P). gpt-oss adds a learned sink
        logit per head (self_attn.sinks, unscaled) to the softmax denominator only, and an o_proj bias."""
        c = self.c
        T = x.shape[0]
        nh, nkv, hd = c["num_attention_heads"], c["num_key_value_heads"], self.hd
        qp = x @ self.W(p + "q_proj.weight").T + self.w.get(p + "q_proj.bias", 0.0)
        if self.zc:  # per-head [q | gate] interleave (models.md §3.4)
            qp = qp.reshape(T, nh, 2 * hd)
            q, gate = qp[..., :hd], qp[..., hd:].reshape(T, nh * hd)
        else:
            q, gate = qp.reshape(T, nh, hd), None
        k = (x @ self.W(p + "k_proj.weight").T + self.w.get(p + "k_proj.bias", 0.0)).reshape(T, nkv, hd)
        v = (x @ self.W(p + "v_proj.weight").T + self.w.get(p + "v_proj.bias", 0.0)).reshape(T, nkv, hd)
        if (p + "q_norm.weight") in self.w:  # q/k norms (Qwen3; GLM with use_qk_norm)
            q = self.norm(q, p + "q_norm.weight", self.zc)
            k = self.norm(k, p + "k_norm.weight", self.zc)
        pos = np.arange(T)
        q, k = self.rope(q, pos), self.rope(k, pos)
        rep = nh // nkv
        out = np.zeros((T, nh, hd), np.float32)
        mask = np.triu(np.full((T, T), -np.inf, np.float32), 1)
        if window is not None:
            mask = mask + np.tril(np.full((T, T), -np.inf, np.float32), -window)
        sinks = self.w.get(p + "sinks")
        for h in range(nh):
            s = (q[:, h] @ k[:, h // rep].T) * hd**-0.5 + mask
            m = s.max(-1, keepdims=True)
            if sinks is not None:
                m = np.maximum(m, sinks[h])
            e = np.exp(s - m)
            den = e.sum(-1, keepdims=True)
            if sinks is not None:
                sink_e = np.exp(sinks[h] - m)
                den = den + sink_e
                self.stats["sink_share"][p + str(h)] = float((sink_e / den).mean())
            out[:, h] = (e / den) @ v[:, h // rep]
        out = out.reshape(T, nh * hd)
        if gate is not None:
            out = out * sigmoid(gate)
        return out @ self.W(p + "o_proj.weight").T + self.w.get(p + "o_proj.bias", 0.0)

    def mla_attention(self, x, p):
        """Multi-head latent attention (DeepSeek-V3), in the expanded form: every head's key is
        [k_nope(latent) | k_rope], its value v(latent); RoPE (interleaved pairs with rope_interleave, which
        only permutes the dims q and k share) on the rope part; the softmax scaled by qk_head_dim^-1/2 and,
        under YaRN with mscale_all_dim, by that mscale squared."""
        c = self.c
        T = x.shape[0]
        nh, nope, R, dv, L = c["num_attention_heads"], c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"], c["kv_lora_rank"]
        if c.get("q_lora_rank"):
            q = self.norm(x @ self.W(p + "q_a_proj.weight").T, p + "q_a_layernorm.weight", False) @ self.W(p + "q_b_proj.weight").T
        else:
            q = x @ self.W(p + "q_proj.weight").T
        q = q.reshape(T, nh, nope + R)
        ckv = x @ self.W(p + "kv_a_proj_with_mqa.weight").T
        lat, kr = self.norm(ckv[:, :L], p + "kv_a_layernorm.weight", False), ckv[:, L:].reshape(T, 1, R)
        kv = (lat @ self.W(p + "kv_b_proj.weight").T).reshape(T, nh, nope + dv)
        kn, v = kv[..., :nope], kv[..., nope:]
        qn, qr = q[..., :nope], q[..., nope:]
        if c.get("rope_interleave", True):  # pairs (2i, 2i+1) -> halves, then NeoX
            perm = np.concatenate([np.arange(0, R, 2), np.arange(1, R, 2)])
            qr, kr = qr[..., perm], kr[..., perm]
        pos = np.arange(T)
        qr, kr = self.rope(qr, pos), self.rope(kr, pos)
        scale = (nope + R) ** -0.5
        y = self.yarn
        if y is not None and y.get("mscale_all_dim"):
            m = 0.1 * y["mscale_all_dim"] * np.log(y["factor"]) + 1.0 if y["factor"] > 1 else 1.0
            scale = scale * m * m
        out = np.zeros((T, nh, dv), np.float32)
        mask = np.triu(np.full((T, T), -np.inf, np.float32), 1)
        for h in range(nh):
            s = (qn[:, h] @ kn[:, h].T + qr[:, h] @ kr[:, 0].T) * scale + mask
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            out[:, h] = s @ v[:, h]
        return out.reshape(T, nh * dv) @ self.W(p + "o_proj.weight").T

    def gdn(self, x, p):
        c = self.c
        T = x.shape[0]
        nk, nv, dk, dv = c["linear_num_key_heads"], c["linear_num_value_heads"], c["linear_key_head_dim"], c["linear_value_head_dim"]
        r = nv // nk
        if self.family == "qwen3_next":  # un-interleave per key-head group (models.md §3.5.2)
            P = (x @ self.W(p + "in_proj_qkvz.weight").T).reshape(T, nk, 2 * dk + 2 * r * dv)
            q, k = P[..., :dk], P[..., dk : 2 * dk]
            v = P[..., 2 * dk : 2 * dk + r * dv].reshape(T, nv, dv)
            z = P[..., 2 * dk + r * dv :].reshape(T, nv, dv)
            BA = (x @ self.W(p + "in_proj_ba.weight").T).reshape(T, nk, 2 * r)
            b, a = BA[..., :r].reshape(T, nv), BA[..., r:].reshape(T, nv)
            u = np.concatenate([q.reshape(T, -1), k.reshape(T, -1), v.reshape(T, -1)], axis=-1)
        else:
            u = x @ self.W(p + "in_proj_qkv.weight").T
            z = (x @ self.W(p + "in_proj_z.weight").T).reshape(T, nv, dv)
            b = x @ self.W(p + "in_proj_b.weight").T
            a = x @ self.W(p + "in_proj_a.weight").T
        cw = self.W(p + "conv1d.weight")[:, 0, :]  # [C, K]
        K = cw.shape[1]
        up = np.concatenate([np.zeros((K - 1, u.shape[1]), np.float32), u], axis=0)
        conv = sum(cw[:, i][None, :] * up[i : i + T] for i in range(K))
        uc = silu(conv)
        q = uc[:, : nk * dk].reshape(T, nk, dk)
        k = uc[:, nk * dk : 2 * nk * dk].reshape(T, nk, dk)
        v = uc[:, 2 * nk * dk :].reshape(T, nv, dv)
        q = q / np.sqrt((q * q).sum(-1, keepdims=True) + 1e-6) * dk**-0.5
        k = k / np.sqrt((k * k).sum(-1, keepdims=True) + 1e-6)
        beta = sigmoid(b)
        g = -np.exp(self.W(p + "A_log")) * softplus(a + self.W(p + "dt_bias"))
        alpha = np.exp(g)
        S = np.zeros((nv, dk, dv), np.float32)
        o = np.zeros((T, nv, dv), np.float32)
        for t in range(T):
            for j in range(nv):
                m = j // r
                S[j] *= alpha[t, j]
                kv = S[j].T @ k[t, m]
                S[j] += np.outer(k[t, m], beta[t, j] * (v[t, j] - kv))
                o[t, j] = S[j].T @ q[t, m]
        y = rms(o, self.eps) * self.W(p + "norm.weight") * silu(z)
        return y.reshape(T, nv * dv) @ self.W(p + "out_proj.weight").T

    def mlp(self, x, p):
        if (p + "gate_proj.weight") in self.w:  # a dense layer (dense Qwen3: every layer)
            h = silu(x @ self.W(p + "gate_proj.weight").T) * (x @ self.W(p + "up_proj.weight").T)
            return h @ self.W(p + "down_proj.weight").T
        if (p + "router.weight") in self.w:
            return self.moe_gpt_oss(x, p)
        return self.moe(x, p)

    def moe_gpt_oss(self, x, p, alpha=1.702, limit=7.0):
        """gpt-oss: router logits = x W^T + b; the top-k logits softmaxed among themselves; each expert
        input-major (y = x @ W + b) with gate j in column 2j and up j in 2j+1 of gate_up_proj; gate clamped
        above at limit, up to [-limit, limit]; (up + 1) * gate * sigmoid(alpha * gate) @ down_proj + bias."""
        k = self.c["num_experts_per_tok"]
        logits = x @ self.W(p + "router.weight").T + self.W(p + "router.bias")
        self.router_logits.append(logits)
        wgu, bgu = self.W(p + "experts.gate_up_proj"), self.W(p + "experts.gate_up_proj_bias")  # [E, H, 2I], [E, 2I]
        wd, bd = self.W(p + "experts.down_proj"), self.W(p + "experts.down_proj_bias")  # [E, I, H], [E, H]
        out = np.zeros_like(x)
        for t in range(x.shape[0]):
            top = np.argsort(-logits[t], kind="stable")[:k]
            wts = np.exp(logits[t, top] - logits[t, top].max())
            wts /= wts.sum()
            for e, wt in zip(top, wts):
                gu = x[t] @ wgu[e] + bgu[e]
                gate, up = gu[0::2], gu[1::2]
                self.stats["gate_clipped"] += int((gate > limit).sum())
                self.stats["up_clipped"] += int((np.abs(up) > limit).sum())
                self.stats["expert_rows"] += 1
                gate, up = np.minimum(gate, limit), np.clip(up, -limit, limit)
                out[t] += wt * (((up + 1.0) * gate * sigmoid(alpha * gate)) @ wd[e] + bd[e])
        return out

    def moe(self, x, p):
        c = self.c
        E, k = c.get("num_experts", c.get("num_local_experts")), c["num_experts_per_tok"]  # transformers 5 writes the latter
        if E is None:
            E = c["n_routed_experts"]
        logits = x @ self.W(p + "gate.weight").T
        sig = (p + "gate.e_score_correction_bias") in self.w
        if sig:  # sigmoid scores; the bias and the groups choose (each group scored by its two best)
            pr = sigmoid(logits)
            choice = pr + self.W(p + "gate.e_score_correction_bias")[None, :]
            G, kg = c.get("n_group", 1), c.get("topk_group", 1)
            grp = np.sort(choice.reshape(-1, G, E // G), axis=-1)[..., -2:].sum(-1)
            keep = np.argsort(-grp, axis=-1, kind="stable")[:, :kg]
            gmask = np.zeros((x.shape[0], G), bool)
            np.put_along_axis(gmask, keep, True, axis=-1)
            choice = np.where(np.repeat(gmask, E // G, axis=-1), choice, -np.inf)
        else:
            pr = np.exp(logits - logits.max(-1, keepdims=True))
            pr /= pr.sum(-1, keepdims=True)
            choice = pr
        out = np.zeros_like(x)
        fused = (p + "experts.gate_up_proj") in self.w
        for t in range(x.shape[0]):
            top = np.argsort(-choice[t], kind="stable")[:k]
            wts = pr[t, top]
            if self.renorm:
                wts = wts / (wts.sum() + (1e-20 if sig else 0.0))
            wts = wts * c.get("routed_scaling_factor", 1.0)
            for e, wt in zip(top, wts):
                if fused:
                    gu = self.W(p + "experts.gate_up_proj")[e]
                    I = gu.shape[0] // 2
                    wg, wu, wd = gu[:I], gu[I:], self.W(p + "experts.down_proj")[e]
                else:
                    wg = self.W(f"{p}experts.{e}.gate_proj.weight")
                    wu = self.W(f"{p}experts.{e}.up_proj.weight")
                    wd = self.W(f"{p}experts.{e}.down_proj.weight")
                out[t] += wt * (wd @ (silu(wg @ x[t]) * (wu @ x[t])))
        if (p + "shared_expert_gate.weight") in self.w:
            s = p + "shared_expert."
            sh = silu(x @ self.W(s + "gate_proj.weight").T) * (x @ self.W(s + "up_proj.weight").T)
            sh = sh @ self.W(s + "down_proj.weight").T
            out += sigmoid(x @ self.W(p + "shared_expert_gate.weight").T) * sh
        if (p + "shared_experts.gate_proj.weight") in self.w:  # ungated (GLM, DeepSeek-V3)
            s = p + "shared_experts."
            sh = silu(x @ self.W(s + "gate_proj.weight").T) * (x @ self.W(s + "up_proj.weight").T)
            out += sh @ self.W(s + "down_proj.weight").T
        return out

    def layer(self, x, L, typ):
        h = self.norm(x, L + "input_layernorm.weight", self.zc)
        if self.mla:
            x = x + self.mla_attention(h, L + "self_attn.")
        elif typ == "full_attention":
            x = x + self.attention(h, L + "self_attn.")
        elif typ == "sliding_attention":
            x = x + self.attention(h, L + "self_attn.", window=self.c["sliding_window"])
        else:
            x = x + self.gdn(h, L + "linear_attn.")
        return x + self.mlp(self.norm(x, L + "post_attention_layernorm.weight", self.zc), L + "mlp.")

    def head(self):
        return self.W("lm_head.weight" if "lm_head.weight" in self.w else self.pre + "embed_tokens.weight")  # tied

    def forward(self, ids):
        # what the last forward saw (make_goldens' provisional goldens report it): clamped gpt-oss expert
        # values, each head's mean sink share, the router logits per MoE layer
        self.stats = {"gate_clipped": 0, "up_clipped": 0, "expert_rows": 0, "sink_share": {}}
        self.router_logits = []
        pre = self.pre
        x = self.W(pre + "embed_tokens.weight")[ids].astype(np.float32)
        hidden = []
        for i, typ in enumerate(self.types):
            x = self.layer(x, f"{pre}layers.{i}.", typ)
            hidden.append(x.copy())
        x = self.norm(x, pre + "norm.weight", self.zc)
        self.final_normed = x
        return x @ self.head().T, hidden

    def mtp(self, next_ids, hidden):
        """The multi-token-prediction head over rows at positions 0..n-1 (models.md §3.7): row p reads the
        token after p and the hidden row h_p. Qwen3-Next / Qwen3.5: x = mtp.fc([norm_e(embed); norm_h(h)]),
        the head's full-attention layer, mtp.norm; its normed output is the next chained h. A nextn head
        (GLM-4.5, DeepSeek-V3: model.layers.N after the decoder's) names them eh_proj / enorm / hnorm /
        shared_head.norm, zeroes the embedding of the row at position 0 and chains the layer's output
        before its norm (vLLM deepseek_mtp.py). Returns (the chained rows, logits)."""
        nextn = self.family in ("glm4_moe", "deepseek_v3")
        if nextn:
            L = f"{self.pre}layers.{len(self.types)}."
            fc, ne, nh, fn = L + "eh_proj.weight", L + "enorm.weight", L + "hnorm.weight", L + "shared_head.norm.weight"
        else:
            L = "mtp.layers.0."
            fc, ne, nh, fn = "mtp.fc.weight", "mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight", "mtp.norm.weight"
        emb = self.W(self.pre + "embed_tokens.weight")[next_ids].astype(np.float32)
        if nextn:
            emb[0] = 0.0
        x = np.concatenate([self.norm(emb, ne, self.zc), self.norm(hidden, nh, self.zc)], axis=-1) @ self.W(fc).T
        z = self.layer(x, L, "full_attention")
        out = self.norm(z, fn, self.zc)
        return (z if nextn else out), out @ self.head().T


def check(gdir: str, tol: float) -> bool:
    info = json.load(open(os.path.join(gdir, "golden.json")))
    gold = {k: v[1] for k, v in mg.read_safetensors(os.path.join(gdir, "golden.safetensors"))[0].items()}
    model = Model(gdir, info["family"])
    ids = gold["input_ids"].astype(np.int64)
    logits, hidden = model.forward(ids)
    d_logits = float(np.abs(logits - gold["logits"]).max())
    d_hidden = max(float(np.abs(h - gold[f"hidden_{i}"]).max() / max(1.0, np.abs(gold[f"hidden_{i}"]).max())) for i, h in enumerate(hidden))
    full = np.concatenate([ids, gold["greedy_ids"][:-1].astype(np.int64)])
    lg, _ = model.forward(full)
    d_greedy = float(np.abs(lg[len(ids) - 1 :] - gold["greedy_logits"]).max())
    ok = d_logits <= tol and d_hidden <= tol and d_greedy <= tol
    line = f"logits {d_logits:.2e}, hidden (rel) {d_hidden:.2e}, greedy {d_greedy:.2e}"
    if "mtp_logits" in gold:  # the head over the prompt, then chained on its own rows (make_goldens' mtp_reference)
        d_final = float(np.abs(model.final_normed[: len(ids)] - gold["final_hidden"]).max())
        toks, hid = gold["mtp_tokens"].astype(np.int64), model.final_normed[: len(ids)]
        for _ in range(len(toks) - len(ids) + 1):
            chain, mtp_logits = model.mtp(toks[: hid.shape[0]], hid)
            hid = np.concatenate([hid, chain[-1:]], axis=0)
        d_mtp = float(np.abs(mtp_logits - gold["mtp_logits"]).max())
        ok = ok and d_final <= tol and d_mtp <= tol
        line += f", final hidden {d_final:.2e}, MTP head {d_mtp:.2e}"
    print(f"{'ok  ' if ok else 'FAIL'} {info['name']}: {line}")
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default=os.path.join(_HERE, "..", "tests", "data", "goldens"))
    ap.add_argument("--only", action="append", default=[])
    ap.add_argument("--tol", type=float, default=1e-4)
    args = ap.parse_args()
    index = json.load(open(os.path.join(args.dir, "index.json")))
    # "provisional": goldens whose reference is this script's own numpy model (make_goldens --numpy-reference)
    # until transformers regenerates them; checked too (they prove the files read back and the script runs)
    listed = index["goldens"] + index.get("provisional", [])
    results = [check(os.path.join(args.dir, g["dir"]), args.tol) for g in listed if not args.only or g["name"] in args.only]
    print(f"{sum(results)} passed, {len(results) - sum(results)} failed")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
