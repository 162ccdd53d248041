"""What changes when the notebooks run on a GPU: the dtype, the model, and how tokens are compared.

Notebooks 06 and 07 and ``scripts/gpu_check.py`` call these, so what a learner sees on a Colab T4,
an A100 or a CPU is decided in one place and tested on CPU. None of the GPU behaviour described here
has been run in this project's CI (it has no GPU); the GPU check is the script that will run it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

RANDOM_LLAMA = "random:llama-3.2-1b"
REAL_LLAMA = "meta-llama/Llama-3.2-1B"
_TOKEN_VARS = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
# Greedy tokens of two correct implementations can differ where the best two logits are closer than
# their rounding error (GEMM summation order depends on the batch shape on a GPU). Judgement, not a
# GPU measurement: about 100x fp32's error on logits of size ~10, a few bf16/fp16 ulps at that size.
NEAR_TIE_MARGIN = {"float32": 1e-3, "float16": 0.1, "bfloat16": 0.25}


def _cc(device) -> int | None:
    """Compute capability (75 for a T4), None off CUDA (as ``kernels.triton_paged.device_cc`` reads it,
    without importing triton)."""
    import torch

    if torch.device(device).type != "cuda":
        return None
    major, minor = torch.cuda.get_device_capability(device)
    return 10 * major + minor


def model_dtype(device) -> str:
    """float32 on the CPU; bfloat16 on GPUs with bf16 tensor cores (sm_80+: A100, H100, L4...);
    float16 on older ones (a T4, Colab's free GPU, is sm_75)."""
    cc = _cc(device)
    if cc is None:
        return "float32"
    return "bfloat16" if cc >= 80 else "float16"


def dtype_reason(device) -> str:
    """One sentence for the notebook: which dtype :func:`model_dtype` chose, and why."""
    dtype, cc = model_dtype(device), _cc(device)
    if cc is None:
        return "float32 on the CPU: exact, and the speed of the CPU kernels does not depend on it"
    if dtype == "bfloat16":
        return f"bfloat16: this GPU (sm_{cc}) has bf16 tensor cores"
    return (f"float16: this GPU (sm_{cc}) has no bf16 tensor cores (a T4 is sm_75), "
            "so bf16 would be slow or emulated")


def hf_token_present(env: Mapping[str, str] | None = None) -> bool:
    """Is a Hugging Face token configured (``HF_TOKEN`` or a ``huggingface-cli login``)?"""
    env = os.environ if env is None else env
    if any(env.get(v) for v in _TOKEN_VARS):
        return True
    if env is not os.environ:
        return False
    try:
        from huggingface_hub import get_token

        return bool(get_token())
    except Exception:  # older huggingface_hub, or no token file
        return False


def llama_model_name(env: Mapping[str, str] | None = None) -> str:
    """The real gated ``meta-llama/Llama-3.2-1B`` when a Hugging Face token is set, else the same
    shapes with seeded random weights (``random:llama-3.2-1b``: no download, no token, no real text)."""
    return REAL_LLAMA if hf_token_present(env) else RANDOM_LLAMA


def triton_mode(device) -> str:
    """How ``backend="triton"`` runs on ``device``: compiled for this GPU, or Triton's interpreter."""
    import torch

    cc = _cc(device)
    if cc is None:
        return "Triton's interpreter on the CPU (slow; the same kernel source a GPU compiles)"
    return f"compiled for sm_{cc} ({torch.cuda.get_device_name(torch.device(device))})"


# ------------------------------------------------------------------------- comparing greedy tokens
@dataclass(frozen=True)
class TokenMatch:
    equal: bool  # the tokens agree wherever they are compared
    compared: int  # positions compared (all of them, or up to the first near-tie)
    near_tie_at: int | None  # first position where the reference's top-2 logits were within the margin
    first_difference: int | None


def compare_greedy(ours: Sequence[int], ref: Sequence[int], ref_top2_gaps: Sequence[float] | None = None,
                   margin: float = 0.0) -> TokenMatch:  # fmt: skip
    """Greedy tokens against a reference, equal until the first near-tie.

    ``ref_top2_gaps[i]`` is the reference's top-1 minus top-2 logit at generated position ``i``. With
    ``margin=0`` (CPU, fp32: exact equality is expected) every position is compared. With a margin,
    positions from the first one whose gap is below it are not compared: there either token is a
    correct greedy choice, and everything after depends on it."""
    if margin < 0:
        raise ValueError(f"margin must be >= 0, got {margin}")
    if margin > 0 and (ref_top2_gaps is None or len(ref_top2_gaps) < len(ref)):
        raise ValueError("ref_top2_gaps must give one gap per reference token when margin > 0")
    n = min(len(ours), len(ref))
    tie = next((i for i in range(len(ref)) if margin > 0 and ref_top2_gaps[i] < margin), None)
    compared = n if tie is None else min(n, tie)
    diff = next((i for i in range(n) if ours[i] != ref[i]), None)
    length_ok = len(ours) == len(ref) or tie is not None
    equal = length_ok and (diff is None or diff >= compared)
    return TokenMatch(equal, compared, tie, diff)


def hf_greedy(model, input_ids, max_new_tokens: int, pad_token_id: int | None = None):
    """transformers ``generate`` (greedy) for one prompt -> (new token ids, top-1 minus top-2 logit per
    position). ``input_ids`` is moved to the model's device here: older transformers versions do not."""
    import torch

    input_ids = torch.as_tensor(input_ids).reshape(1, -1).to(model.device)
    with torch.no_grad():
        out = model.generate(input_ids, max_new_tokens=max_new_tokens, do_sample=False, output_scores=True,
                             return_dict_in_generate=True, pad_token_id=pad_token_id)  # fmt: skip
    tokens = out.sequences[0, input_ids.shape[1]:].tolist()
    gaps = [float(t[0] - t[1]) for t in (s[0].float().topk(2).values for s in out.scores)]
    return tokens, gaps
