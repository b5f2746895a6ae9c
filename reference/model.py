"""Golden numpy DeepSeek-V3 / Kimi-K2 style decoder at small sizes: MLA with a q LoRA and the absorbed
decode path over a 576-wide latent cache, MoE with a shared expert and top-k routing, RMSNorm, RoPE.

Layer l, for a token x at position p (all float32):
    h      = rmsnorm(x) * attn_norm
    q      = rmsnorm(h @ wq_a) * q_norm @ wq_b            -> [H, nope + rope]; q_pe gets RoPE(p)
    kv     = h @ wkv_a                                     -> c_kv = rmsnorm(kv[:512]) * kv_norm (512),
                                                              k_pe = RoPE(kv[512:], p) (64)
    cache row p of layer l = c_kv ‖ k_pe                   (kv_lora 512 + rope 64 = 576: the kernels' width)
    q_abs  = q_nope absorbed through W_UK (wkv_b's key half) -> [H, 512]; the query is q_abs ‖ q_pe (576)
    attn   = softmax(scale · q·row) over the visible rows, times the rows' first 512 columns (tree_verify)
    x     += (attn absorbed back through W_UV, wkv_b's value half) @ wo
    x     += ffn(rmsnorm(x) * ffn_norm): a SwiGLU MLP in the first `dense_layers` layers, else MoE:
             sigmoid router scores, top-k experts (score descending, index ascending), weights normalized
             over the chosen k, added to an always-on shared expert in expert-index order
logits = rmsnorm(x) * final_norm @ lm_head. RoPE pairs interleaved elements (2i, 2i+1) as DeepSeek-V3
does, with cos/sin tables stored in the weights file so that every implementation uses the same bits.

Weights are seeded random and saved as KDTR (tensors named below, the Config in metadata `model.*`);
the C++ engine loads the same file. This module is the golden reference only: `reference/decode.py`
runs it autoregressively and through the reference ops.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import numpy as np

import kdtr
from contract import limits as v


@dataclasses.dataclass(frozen=True)
class Config:
    vocab: int = 512
    hidden: int = 256
    n_layers: int = 3
    n_heads: int = 8
    q_lora: int = 128
    kv_lora: int = v.LATENT  # the latent cache is kv_lora + rope = 576 wide, the width the kernels are built for
    nope: int = 64
    rope: int = v.ROPE
    v_head: int = 64
    dense_layers: int = 1
    ffn_inter: int = 512
    n_experts: int = 8
    top_k: int = 2
    expert_inter: int = 128
    shared_inter: int = 128
    max_pos: int = 1024
    rms_eps: float = 1e-6
    rope_theta: float = 10000.0
    lm_scale: float = 3.0  # std of the logits at init: sets how often greedy decoding nearly ties

    @property
    def softmax_scale(self) -> float:
        return (self.nope + self.rope) ** -0.5

    def metadata(self) -> dict[str, str]:
        return {f"model.{f.name}": repr(getattr(self, f.name)) for f in dataclasses.fields(self)}

    @classmethod
    def from_metadata(cls, meta: dict[str, str]) -> Config:
        kw: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            raw = meta[f"model.{f.name}"]
            kw[f.name] = float(raw) if f.type == "float" else int(raw)
        return cls(**kw)


def _rope_tables(cfg: Config) -> tuple[np.ndarray, np.ndarray]:
    freqs = cfg.rope_theta ** (-np.arange(0, cfg.rope, 2, dtype=np.float64) / cfg.rope)
    angles = np.arange(cfg.max_pos, dtype=np.float64)[:, None] * freqs[None, :]
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def random_weights(cfg: Config, seed: int) -> dict[str, np.ndarray]:
    """Seeded random weights: matrices N(0, 1/fan_in), norms near 1, the lm_head scaled to cfg.lm_scale."""
    rng = np.random.default_rng(seed)
    f32 = np.float32

    def mat(*shape, fan_in=None):
        fan = fan_in if fan_in is not None else shape[-2]
        return (rng.standard_normal(shape) / np.sqrt(fan)).astype(f32)

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(f32)

    d, H = cfg.hidden, cfg.n_heads
    w = {"embed": rng.standard_normal((cfg.vocab, d)).astype(f32)}
    for i in range(cfg.n_layers):
        p = f"layers.{i}."
        w[p + "attn_norm"] = norm(d)
        w[p + "wq_a"] = mat(d, cfg.q_lora)
        w[p + "q_norm"] = norm(cfg.q_lora)
        w[p + "wq_b"] = mat(cfg.q_lora, H * (cfg.nope + cfg.rope))
        w[p + "wkv_a"] = mat(d, cfg.kv_lora + cfg.rope)
        w[p + "kv_norm"] = norm(cfg.kv_lora)
        w[p + "wkv_b"] = mat(cfg.kv_lora, H * (cfg.nope + cfg.v_head))
        w[p + "wo"] = mat(H * cfg.v_head, d)
        w[p + "ffn_norm"] = norm(d)
        if i < cfg.dense_layers:
            w[p + "w1"], w[p + "w3"], w[p + "w2"] = mat(d, cfg.ffn_inter), mat(d, cfg.ffn_inter), mat(cfg.ffn_inter, d)
        else:
            E, I = cfg.n_experts, cfg.expert_inter
            w[p + "gate"] = mat(d, E)
            w[p + "experts.w1"], w[p + "experts.w3"] = mat(E, d, I), mat(E, d, I)
            w[p + "experts.w2"] = mat(E, I, d)
            S = cfg.shared_inter
            w[p + "shared.w1"], w[p + "shared.w3"], w[p + "shared.w2"] = mat(d, S), mat(d, S), mat(S, d)
    w["final_norm"] = norm(d)
    w["lm_head"] = (rng.standard_normal((d, cfg.vocab)) * (cfg.lm_scale / np.sqrt(d))).astype(f32)
    w["rope_cos"], w["rope_sin"] = _rope_tables(cfg)
    return w


def rmsnorm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """x / sqrt(mean(x²) + eps) * weight over the last axis, in float32."""
    ms = np.mean(x * x, axis=-1, keepdims=True, dtype=np.float32)
    return (x * (np.float32(1.0) / np.sqrt(ms + np.float32(eps)))) * weight


def silu(x: np.ndarray) -> np.ndarray:
    return x / (np.float32(1.0) + np.exp(-x))


class Model:
    """The decoder's weights and its per-layer maths (rows are independent tokens)."""

    def __init__(self, cfg: Config, weights: dict[str, np.ndarray]):
        self.cfg = cfg
        self.w = {k: np.ascontiguousarray(a) for k, a in weights.items()}
        # the absorbed halves of wkv_b per layer, split once: [H, nope, kv_lora] and [H, kv_lora, v_head]
        self._uk, self._uv = [], []
        for layer in range(cfg.n_layers):
            kvb = self.w_(layer, "wkv_b").reshape(cfg.kv_lora, cfg.n_heads, cfg.nope + cfg.v_head)
            self._uk.append(np.ascontiguousarray(kvb[:, :, : cfg.nope].transpose(1, 2, 0)))
            self._uv.append(np.ascontiguousarray(kvb[:, :, cfg.nope :].transpose(1, 0, 2)))

    @classmethod
    def random(cls, cfg: Config | None = None, seed: int = 0) -> Model:
        cfg = cfg or Config()
        return cls(cfg, random_weights(cfg, seed))

    def save(self, path: str | os.PathLike) -> None:
        kdtr.save(path, self.w, self.cfg.metadata(), align_log2=12)

    @classmethod
    def load(cls, path: str | os.PathLike) -> Model:
        f = kdtr.load(path)
        return cls(Config.from_metadata(f.metadata), {k: np.array(f[k]) for k in f.infos})

    def w_(self, layer: int, name: str) -> np.ndarray:
        return self.w[f"layers.{layer}.{name}"]

    # --- pieces --------------------------------------------------------------------------------------
    def rope(self, x: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """Interleaved RoPE on the last axis (pairs 2i, 2i+1); x [..., n, rope] or [n, ..., rope]."""
        cos, sin = self.w["rope_cos"][positions], self.w["rope_sin"][positions]  # [n, rope/2]
        while cos.ndim < x.ndim:
            cos, sin = cos[:, None], sin[:, None]
        x0, x1 = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = x0 * cos - x1 * sin
        out[..., 1::2] = x0 * sin + x1 * cos
        return out

    def attention_inputs(self, layer: int, x: np.ndarray, positions: np.ndarray):
        """For rows x [n, d] at `positions`: the absorbed queries [n, H, 576] and the cache rows [n, 576]."""
        c = self.cfg
        h = rmsnorm(x, self.w_(layer, "attn_norm"), c.rms_eps)
        qa = rmsnorm(h @ self.w_(layer, "wq_a"), self.w_(layer, "q_norm"), c.rms_eps)
        q = (qa @ self.w_(layer, "wq_b")).reshape(len(x), c.n_heads, c.nope + c.rope)
        q_nope, q_pe = q[..., : c.nope], self.rope(q[..., c.nope :], positions)
        kv = h @ self.w_(layer, "wkv_a")
        c_kv = rmsnorm(kv[:, : c.kv_lora], self.w_(layer, "kv_norm"), c.rms_eps)
        k_pe = self.rope(kv[:, c.kv_lora :], positions)
        q_abs = np.matmul(q_nope.transpose(1, 0, 2), self.w_uk(layer)).transpose(1, 0, 2)  # [n, H, 512]
        return np.concatenate([q_abs, q_pe], axis=-1), np.concatenate([c_kv, k_pe], axis=-1)

    def w_uk(self, layer: int) -> np.ndarray:
        """The key half of wkv_b per head, [H, nope, kv_lora] (q_nope · W_UK gives the absorbed query)."""
        return self._uk[layer]

    def w_uv(self, layer: int) -> np.ndarray:
        """The value half of wkv_b per head, [H, kv_lora, v_head]."""
        return self._uv[layer]

    def attention_output(self, layer: int, x: np.ndarray, latent: np.ndarray) -> np.ndarray:
        """x + (latent [n, H, 512] through W_UV, heads concatenated) @ wo."""
        o = np.matmul(latent.astype(np.float32).transpose(1, 0, 2), self.w_uv(layer)).transpose(1, 0, 2)
        return x + o.reshape(len(x), -1) @ self.w_(layer, "wo")

    def ffn(self, layer: int, x: np.ndarray) -> np.ndarray:
        """x + the layer's MLP (dense layers) or MoE with a shared expert."""
        c = self.cfg
        h = rmsnorm(x, self.w_(layer, "ffn_norm"), c.rms_eps)
        if layer < c.dense_layers:
            return x + (silu(h @ self.w_(layer, "w1")) * (h @ self.w_(layer, "w3"))) @ self.w_(layer, "w2")
        out = (silu(h @ self.w_(layer, "shared.w1")) * (h @ self.w_(layer, "shared.w3"))) @ self.w_(layer, "shared.w2")
        scores = np.float32(1.0) / (np.float32(1.0) + np.exp(-(h @ self.w_(layer, "gate"))))
        chosen = route(scores, c.top_k)  # [n, k]
        picked = np.take_along_axis(scores, chosen, axis=1)
        gates = picked / np.sum(picked, axis=1, keepdims=True, dtype=np.float32)
        w1, w3, w2 = self.w_(layer, "experts.w1"), self.w_(layer, "experts.w3"), self.w_(layer, "experts.w2")
        for e in np.unique(chosen):  # each expert once, over the rows that chose it
            rows, slot = np.nonzero(chosen == e)
            he = h[rows]
            out[rows] += gates[rows, slot][:, None] * ((silu(he @ w1[e]) * (he @ w3[e])) @ w2[e])
        return x + out

    def logits(self, x: np.ndarray) -> np.ndarray:
        return rmsnorm(x, self.w["final_norm"], self.cfg.rms_eps) @ self.w["lm_head"]

    def forward(self, tokens: np.ndarray, positions: np.ndarray, attend) -> np.ndarray:
        """Logits [n, V] for rows `tokens` at `positions`. attend(layer, q [n, H, 576], rows [n, 576])
        stores the rows in that layer's cache and returns the latent attention output [n, H, 512]."""
        x = self.w["embed"][tokens]
        for layer in range(self.cfg.n_layers):
            q, rows = self.attention_inputs(layer, x, positions)
            x = self.attention_output(layer, x, attend(layer, q, rows))
            x = self.ffn(layer, x)
        return self.logits(x)


def route(scores: np.ndarray, k: int) -> np.ndarray:
    """Per row, the k experts with the highest scores, ties to the lower index (a stable sort)."""
    return np.argsort(-scores, axis=-1, kind="stable")[..., :k]


def attend_latent(q: np.ndarray, rows: np.ndarray, scale: float) -> np.ndarray:
    """One query [H, 576] over its visible cache rows [n, 576] in order: [H, 512] (absorbed MLA)."""
    s = (q @ rows.T) * np.float32(scale)
    m = s.max(axis=1, keepdims=True)
    e = np.exp(s - m)
    p = e / e.sum(axis=1, keepdims=True)
    return p @ rows[:, : v.LATENT]
