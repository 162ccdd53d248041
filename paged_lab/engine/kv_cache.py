"""The physical KV pool: per-layer ``k_cache`` / ``v_cache`` tensors of shape
``[num_blocks, block_size, num_kv_heads, head_dim]``.

All layers live in one tensor ``[num_layers, 2, num_blocks, block_size, num_kv_heads, head_dim]`` so a
copy-on-write copy of block ``src`` into ``dst`` is one index op over every layer at once.

The cache dtype is vLLM's ``kv_cache_dtype``: ``"auto"``, the model's dtype, or ``"fp8"``: K and V held as
``torch.float8_e4m3fn`` (1 byte a number, a quarter of fp32's, half of bf16's; vLLM allocates ``uint8``
and views it as the platform's ``fp8_dtype()``, e4m3fn on CUDA and CPU), each layer with one
scale for K and one for V (``KVCache.scales``), which the kernels divide by when they store and multiply
by when they read (``paged_lab.kernels.quant``). The scales are 1.0, as vLLM's are when the checkpoint
brings none: ``set_default_quant_scales`` in ``vllm/model_executor/layers/attention/attention.py``
(vllm 0.32.0) fills ``_k_scale`` and ``_v_scale`` with 1.0, and only an fp8-quantized checkpoint loads
others. (0.32.0 no longer has a ``calculate_kv_scales`` option that measures them at run time.)

A model with sliding-window layers has several layer groups (``paged_lab.memory.hybrid``), each with its
own block tables over ONE pool of block ids. The pool then holds one tensor per layer *position* in a
group, not per layer: the i-th layer of every group reads and writes tensor i (``layer_tensor``). That is
sound because a block id belongs to one group at a time, and it is how the window layers' memory is
really saved: a block a window group gave back is reused by any group. vLLM lays its pool out the same
way: every group's ``KVCacheTensor`` starts at byte 0 of one allocation ("cache groups overlay each
other, which is sound because a block ID is owned by one group at a time", ``vllm/v1/kv_cache_interface.py``;
``get_kv_cache_config_from_groups`` in ``vllm/v1/core/kv_cache_utils.py``, vllm 0.32.0), and a block costs
the largest group's pages, ``layers_per_block`` x one layer's page (``_get_kv_cache_bytes_per_block``).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from paged_lab._checks import check_int, check_positive
from paged_lab.kernels.quant import FP8_DTYPE, is_quantized
from paged_lab.kv_math import ModelSpec, canonical_dtype, human_bytes, num_kv_blocks

DEFAULT_KV_CACHE_MEMORY = 512 * 2**20  # bytes, when neither num_kv_blocks nor kv_cache_memory is given
KV_CACHE_DTYPES = ("auto", "fp8")  # vLLM's CacheConfig.cache_dtype names (vllm/config/cache.py)
# The torch dtype of each cache dtype that is not a model dtype
_TORCH_CACHE_DTYPES = {"fp8": FP8_DTYPE}


def resolve_kv_cache_dtype(kv_cache_dtype: str, model_dtype: Any) -> str:
    """The cache dtype for ``kv_cache_dtype`` (one of KV_CACHE_DTYPES): "auto" -> the model's dtype (as
    vLLM's ``kv_cache_dtype_str_to_dtype``, ``vllm/utils/torch_utils.py``), "fp8" -> "fp8"."""
    if not isinstance(kv_cache_dtype, str) or kv_cache_dtype not in KV_CACHE_DTYPES:
        raise ValueError(f"kv_cache_dtype must be one of {KV_CACHE_DTYPES} ('auto': the model's dtype; "
                         f"'fp8': float8_e4m3fn with per-layer scales), got {kv_cache_dtype!r}")
    return canonical_dtype(model_dtype) if kv_cache_dtype == "auto" else kv_cache_dtype


def torch_cache_dtype(dtype: Any) -> torch.dtype:
    """The torch dtype a cache of ``dtype`` ("float32", "bf16", "fp8", torch.bfloat16, ...) holds."""
    name = canonical_dtype(dtype)
    return _TORCH_CACHE_DTYPES.get(name) or getattr(torch, name)


def resolve_num_blocks(spec: ModelSpec, block_size: int, dtype: Any, num_blocks: int | None = None,
                       kv_cache_memory: int | None = None, layers_per_block: int | None = None) -> int:
    """Blocks in the pool: ``num_blocks`` as given, else how many fit in ``kv_cache_memory`` bytes
    (``paged_lab.kv_math.num_kv_blocks``), else how many fit in DEFAULT_KV_CACHE_MEMORY.
    ``layers_per_block``: the pages one block costs, when not one per layer (layer groups: the group
    size, see the module docstring)."""
    if num_blocks is not None and kv_cache_memory is not None:
        raise ValueError("give num_kv_blocks or kv_cache_memory, not both")
    if num_blocks is not None:
        return check_int("num_kv_blocks", num_blocks, minimum=1)
    memory = DEFAULT_KV_CACHE_MEMORY if kv_cache_memory is None else kv_cache_memory
    check_positive("kv_cache_memory", memory)  # (num_kv_blocks would name its own argument, memory_bytes)
    if layers_per_block is None:
        need = block_size * spec.kv_bytes_per_token(dtype)
        n = num_kv_blocks(spec, memory, block_size, dtype)
    else:
        need = layers_per_block * block_size * spec.kv_bytes_per_layer_token(dtype)  # pages of one block
        n = int(memory // need)
    if n < 1:
        raise ValueError(f"kv_cache_memory={memory} bytes holds no block: one block of {block_size} "
                         f"tokens needs {need} bytes")
    return n


class KVCache:
    """Per-layer paged K/V tensors; ``kv.layers[i]`` is ``(k_cache, v_cache)`` of layer i, and
    ``kv.scales[i]`` its ``(k_scale, v_scale)`` (used by an fp8 cache only; 1.0, vLLM's default).

    dtype: the cache dtype, "float32", "bfloat16", "float16" or "fp8" (``torch.float8_e4m3fn``).
    ``layer_tensor``: per layer, the tensor it uses (default: its own, ``range(num_layers)``; layer groups:
    its position in its group, see the module docstring). ``bytes``: the pool's size, num_tensors x 2 x
    num_blocks x block_size x num_kv_heads x head_dim x bytes per number."""

    def __init__(self, spec: ModelSpec, num_blocks: int, block_size: int, dtype: Any = "float32",
                 device: str | torch.device = "cpu", size_arg: str = "num_blocks",
                 layer_tensor: list[int] | None = None):
        """``size_arg`` names the argument that sized the pool, for the error when it cannot be allocated."""
        self.num_blocks, self.block_size = num_blocks, block_size
        self.dtype = torch_cache_dtype(dtype)
        self.layer_tensor = list(range(spec.num_layers)) if layer_tensor is None else list(layer_tensor)
        if len(self.layer_tensor) != spec.num_layers or min(self.layer_tensor) < 0:
            raise ValueError(f"layer_tensor must give each of the {spec.num_layers} layers a tensor "
                             f"index >= 0, got {self.layer_tensor}")
        self.num_tensors = max(self.layer_tensor) + 1
        shape = (self.num_tensors, 2, num_blocks, block_size, spec.num_kv_heads, spec.head_dim)
        self.data = _allocate(shape, self.dtype, device, size_arg)
        self.layers = [(self.data[t, 0], self.data[t, 1]) for t in self.layer_tensor]
        self.scales = [(1.0, 1.0)] * spec.num_layers  # per layer (k_scale, v_scale): see the module docstring
        self.bytes = self.data.numel() * self.data.element_size()

    @property
    def quantized(self) -> bool:
        """Whether the pool holds scaled fp8 numbers (its kernels need ``scales``)."""
        return is_quantized(self.dtype)

    def copy_blocks(self, pairs: list[tuple[int, int]]) -> None:
        """Copy-on-write: block src -> block dst in every tensor, for each (src, dst) pair."""
        if not pairs:
            return
        src = torch.tensor([p[0] for p in pairs], device=self.data.device)
        dst = torch.tensor([p[1] for p in pairs], device=self.data.device)
        self.data[:, :, dst] = self.data[:, :, src]


def _allocate(shape: tuple[int, ...], dtype: torch.dtype, device, size_arg: str) -> torch.Tensor:
    """The zeroed pool, or a MemoryError that says how much was asked and which argument to lower
    (instead of torch's allocator message). Zeros, not empty: never-written slots must hold finite
    numbers, and on Linux a large zeroed allocation stays lazily mapped, so unused blocks cost no
    resident memory."""
    try:
        return torch.zeros(shape, dtype=dtype, device=device)
    except RuntimeError as err:  # the CPU allocator's error; torch.OutOfMemoryError (CUDA) is one too
        if not isinstance(err, torch.OutOfMemoryError) and "allocate" not in str(err):
            raise
        need = math.prod(shape) * dtype.itemsize
        raise MemoryError(
            f"the KV pool of {shape[2]} blocks x {shape[3]} tokens needs {need} bytes ({human_bytes(need)}) "
            f"on {device}, more than can be allocated there; lower {size_arg}") from err
