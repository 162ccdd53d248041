"""RoPE's settings from a transformers config (the inverse frequencies, the scale of cos/sin) and the
cos/sin tables the model (``engine.llama.PagedLlama``) reads. Transformers reads the settings under two
spellings (``rope_parameters`` since transformers 5, ``rope_theta`` + ``rope_scaling`` before), and scales
them by one of several schemes.
"""

from __future__ import annotations

import math
from typing import Any

import torch


def rope_parameters(config: Any) -> dict:
    """The RoPE settings of a transformers config: ``rope_parameters`` (transformers 5) or the older
    ``rope_theta`` + ``rope_scaling`` pair, as one dict with at least ``rope_type`` and ``rope_theta``."""
    params = dict(getattr(config, "rope_parameters", None) or {})
    legacy = getattr(config, "rope_scaling", None) or {}
    for key, value in dict(legacy).items():
        params.setdefault(key, value)
    if "type" in params and "rope_type" not in params:
        params["rope_type"] = params["type"]
    params.setdefault("rope_type", "default")
    params.setdefault("rope_theta", getattr(config, "rope_theta", 10000.0))
    return params


def rope_inv_freq(config: Any, head_dim: int) -> tuple[torch.Tensor, float]:
    """Inverse frequencies [head_dim // 2] and the cos/sin scale, as transformers computes them."""
    params = rope_parameters(config)
    kind = params["rope_type"]
    base = float(params["rope_theta"])
    dim = int(head_dim * params.get("partial_rotary_factor", 1.0))
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    if kind == "default":
        return inv_freq, 1.0
    if kind == "linear":
        return inv_freq / params["factor"], 1.0
    if kind == "llama3":
        # Llama 3.1+: long wavelengths (low frequencies) are stretched by `factor`, short ones kept,
        # the band in between interpolated smoothly.
        factor = params["factor"]
        low, high = params["low_freq_factor"], params["high_freq_factor"]
        old_len = params["original_max_position_embeddings"]
        low_wavelen, high_wavelen = old_len / low, old_len / high
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
        smooth = (old_len / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        is_medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
        return torch.where(is_medium, smoothed, scaled), 1.0
    # Other schemes (yarn, longrope, ...): use transformers' own initialiser rather than a second copy.
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    if kind not in ROPE_INIT_FUNCTIONS:
        raise ValueError(f"rope_type={kind!r} is not supported; known: default, linear, llama3, "
                         f"{', '.join(ROPE_INIT_FUNCTIONS)}")
    inv_freq, scale = ROPE_INIT_FUNCTIONS[kind](config, None)
    return inv_freq.float().cpu(), float(scale)


class RopeTables:
    """cos and pre-signed sin of every position, ``[length, head_dim]`` each, grown on demand.

    RoPE is ``x * cos + rotate_half(x) * sin`` with ``rotate_half(x) = cat(-x2, x1)``. That equals
    ``x.roll(half) * sin_signed`` with sin's first half negated (exactly: only signs move), 2 ops fewer:
    ``engine.llama.rope`` computes it so."""

    def __init__(self, config: Any, head_dim: int, device, dtype: torch.dtype, length: int):
        inv_freq, self.scale = rope_inv_freq(config, head_dim)
        self.inv_freq, self.dtype = inv_freq.to(device), dtype  # [head_dim // 2]
        self.extend(length)

    def extend(self, length: int) -> None:
        """The tables for positions 0 .. length - 1."""
        pos = torch.arange(length, device=self.inv_freq.device, dtype=torch.float32)
        freqs = pos[:, None] * self.inv_freq[None, :]  # [length, head_dim // 2]
        emb = torch.cat((freqs, freqs), dim=-1)  # [length, head_dim]
        self.cos = (emb.cos() * self.scale).to(self.dtype)
        sin = (emb.sin() * self.scale).to(self.dtype)
        half = sin.shape[-1] // 2
        self.sin_signed = torch.cat((-sin[:, :half], sin[:, half:]), dim=-1)

    def __call__(self, positions: torch.Tensor, max_position: int | None = None) -> tuple[torch.Tensor, ...]:
        """cos and pre-signed sin of each position, each ``[num_tokens, 1, head_dim]``; the tables grow when
        a position is past their end. ``max_position``: the largest position, when the caller knows it
        (else it is read from ``positions``: a device sync)."""
        top = int(positions.max()) if max_position is None else max_position
        if top >= self.cos.shape[0]:
            self.extend(max(top + 1, 2 * self.cos.shape[0]))
        return self.cos[positions].unsqueeze(1), self.sin_signed[positions].unsqueeze(1)
