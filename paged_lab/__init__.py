"""paged_lab: the companion package of the paged-lab notebook series.

Every real piece of logic lives here; the notebooks import it, explain it and check it.

    from paged_lab import LLM, SamplingParams   # as `from vllm import LLM, SamplingParams`

``import paged_lab`` loads no torch: the engine and the kernels load on first use (``LLM``,
``paged_lab.kernels``), so a notebook about memory arithmetic starts in well under a second.
"""

from __future__ import annotations

import importlib

from paged_lab.kv_math import ModelSpec, get_spec, kv_bytes_per_token, list_specs, num_kv_blocks

__version__ = "0.1.0"

# name -> the module it lives in, imported on first access (PEP 562)
_LAZY = {
    "LLM": "paged_lab.engine",
    "SamplingParams": "paged_lab.engine",
    "RequestOutput": "paged_lab.engine",
    "CompletionOutput": "paged_lab.engine",
    "load_model": "paged_lab.models",
}

__all__ = ["ModelSpec", "get_spec", "kv_bytes_per_token", "list_specs", "num_kv_blocks", "device", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'paged_lab' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


def device() -> str:
    """'cuda' when a CUDA GPU is visible, else 'cpu'. Notebooks use it to pick where tensors live."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
