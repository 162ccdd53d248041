"""The projections with a packed copy of the weights, made once for the CPU: the fast path's ``linear``.

A decode step multiplies a few rows (one per running sequence) by every weight of the model, so on a
CPU its cost is set by how well the GEMM handles a tiny M: it streams all the weights (SmolLM2-135M in
fp32: 0.54 GB) for a few rows of arithmetic. torch's default CPU GEMM for fp32 is MKL's ``sgemm``, which
repacks the weight on every call. :class:`PackedLinear` keeps one packed copy instead, in one of two forms:

- **panels** for the C matmul (``kernels.cpu.gemm``, CPU with AVX-512): every weight read once in memory
  order, up to ``gemm.MAX_ROWS`` rows (256 in fp32, 4 in bf16), faster than oneDNN there. More rows are
  compute-bound: fp32 runs ``F.linear`` on the model's own tensors there (as fast as oneDNN at a thousand
  rows), bf16 a oneDNN copy as well (AMX tiles: faster than the C loop from 8 rows on).
- **oneDNN** (bundled with torch as ``mkldnn``), with the weight reordered once into its blocked layout,
  where the C matmul cannot run: faster than MKL for decode-sized M, most for SmolLM2's 49152 x 576 head.
  vLLM's CPU backend does the same.

What each measured: ``benchmarks/linear_bench.py``, and docs/benchmarks.md ("The decode matmuls in C",
"Prepacked oneDNN weights", "oneDNN's prepacked matmul is padded to 4 rows").

Prepacking costs a second copy of every weight (the transformers model keeps its own; bf16 keeps a third,
oneDNN's), so it is a choice (``kernels.cpu.fast_path``): the model's forward otherwise runs ``F.linear`` on
the model's own tensors. The results are fp32 matmuls either way; they differ only in summation order
(about 1e-6 relative).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from paged_lab.kernels.cpu import gemm

# The decode batch oneDNN lays the prepacked weights out for (PackedLinear's batch_hint).
BATCH_HINT = 8
# oneDNN's prepacked matmul is slower for 1-3 rows than for 4 (docs/benchmarks.md): fewer rows are padded
# up to this many.
PACKED_MIN_ROWS = 4


def can_prepack(weight: torch.Tensor) -> bool:
    """True where oneDNN can prepack this weight: a CPU fp32 tensor, or bf16 on a CPU whose oneDNN has a
    bf16 path (AVX-512 BF16/AVX-NE-CONVERT; elsewhere the reorder raises), and a torch built with mkldnn."""
    return (weight.device.type == "cpu" and weight.dtype in (torch.float32, torch.bfloat16)
            and torch.backends.mkldnn.is_available()
            and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
            and (weight.dtype == torch.float32 or torch.ops.mkldnn._is_mkldnn_bf16_supported()))


def check_packable(weight: torch.Tensor) -> None:
    """Raise unless :func:`can_prepack` takes this weight (``LLM(cpu_prepack=True)`` on a GPU, in fp16)."""
    if not can_prepack(weight):
        raise ValueError(f"prepack=True needs a CPU float32/bfloat16 weight and a torch built with "
                         f"mkldnn; got a {weight.dtype} weight on {weight.device}")


def _stack(weights: list[torch.Tensor]) -> torch.Tensor:
    """The weights one above the other, ``[sum(out_i), in_features]``: the first itself if alone, else a
    copy in a memory mapping of its own, which goes back to the OS as soon as oneDNN has its reordered
    copy (a freed ``torch.cat`` result can stay in the heap, resident, as the panel path's did:
    ``gemm.pack``; this oneDNN path's share of that was not measured)."""
    if len(weights) == 1:
        return weights[0]
    stacked = gemm.empty_in_huge_pages((sum(w.shape[0] for w in weights), weights[0].shape[1]),
                                       weights[0].dtype)
    return torch.cat(weights, out=stacked)


class PackedLinear:
    """``y = x @ weight.T + bias`` for one projection of the model, or for several that read the same
    input (q/k/v, gate/up), kept side by side, as ``engine.llama.Linear`` computes it, from a packed copy.

    weights: one [out_features, in_features] tensor or a list of them (same in_features): the
    transformers tensors themselves, never copied or changed. One packed copy of them all is kept,
    stacked (one wide matmul instead of several narrow ones: the copy is made anyway, so stacking costs no
    extra RAM): ``panels`` for the C matmul where it can run, else (and for bf16 as well) ``packed`` for
    oneDNN (see the module docstring); ``F.linear`` on the model's tensors where neither applies.
    ``batch_hint``: the M that oneDNN picks its layout for (any M works; what the hint changed, measured:
    docs/benchmarks.md).
    """

    __slots__ = ("weights", "biases", "sizes", "packed", "packed_bias", "panels")

    def __init__(self, weights, biases=None, batch_hint: int | None = BATCH_HINT):
        self.weights = [weights] if isinstance(weights, torch.Tensor) else list(weights)
        self.biases = list(biases) if isinstance(biases, (list, tuple)) else [biases] * len(self.weights)
        if len(self.biases) != len(self.weights):
            raise ValueError(f"biases: {len(self.biases)} entries for {len(self.weights)} weights")
        self.sizes = [w.shape[0] for w in self.weights]
        self.packed = self.packed_bias = self.panels = None
        check_packable(self.weights[0])
        if any(b is not None for b in self.biases):
            self.packed_bias = torch.cat([w.new_zeros(w.shape[0]) if b is None else b
                                          for w, b in zip(self.weights, self.biases)])
        if all(gemm.why_unusable(w) is None for w in self.weights):
            self.panels = gemm.pack(self.weights)  # each weight into its panels: no stacked copy
        if self.panels is None or self.weights[0].dtype == torch.bfloat16:  # bf16 prefills: oneDNN's AMX path
            self.packed = torch.ops.mkldnn._reorder_linear_weight(_stack(self.weights), batch_hint)

    @property
    def out_features(self) -> int:
        return sum(self.sizes)

    @property
    def is_prepacked(self) -> bool:
        return self.panels is not None or self.packed is not None

    def _packed_matmul(self, x: torch.Tensor) -> torch.Tensor | None:
        """x @ the packed copy -> ``[..., out_features]``, or None where only ``F.linear`` applies (an fp32
        prefill past the C matmul's rows, where MKL is as fast and no oneDNN copy is kept)."""
        rows = x.shape[0] if x.dim() == 2 else -1
        if self.panels is not None and 0 < rows <= gemm.MAX_ROWS[self.panels.dtype]:
            return gemm.matmul(x, self.panels, self.packed_bias)
        if self.packed is None:
            return None
        pad = PACKED_MIN_ROWS - rows if 0 < rows < PACKED_MIN_ROWS else 0
        if pad:  # zero rows, computed and dropped
            x = F.pad(x, (0, 0, 0, pad))
        y = torch.ops.mkldnn._linear_pointwise(x, self.packed, self.packed_bias, "none", [], "")
        return y[:-pad] if pad else y

    def parts(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """x: [..., in_features] -> one [..., out_i] tensor per weight (views of one output if packed)."""
        y = self._packed_matmul(x)
        if y is None:
            return tuple(F.linear(x, w, b) for w, b in zip(self.weights, self.biases))
        # split_with_sizes is the op Tensor.split calls; called directly it skips torch's Python wrapper
        # (4.6 -> 2.1 us at 4 rows, twice per layer)
        return (y,) if len(self.sizes) == 1 else y.split_with_sizes(self.sizes, dim=-1)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """x: [..., in_features] -> [..., out_features] (the parts side by side)."""
        y = self._packed_matmul(x)
        if y is not None:  # already one stacked output
            return y
        parts = tuple(F.linear(x, w, b) for w, b in zip(self.weights, self.biases))
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)
