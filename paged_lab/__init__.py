"""paged_lab: the companion package of the paged-lab notebook series.

Every real piece of logic lives here; the notebooks import it, explain it and check it.
"""

# Triton decides when it is first imported whether @triton.jit kernels compile or run under its
# interpreter, so on a machine without CUDA the choice is made here, before anything imports triton.
from paged_lab.kernels._interpret import default_interpreter_env

default_interpreter_env()

from paged_lab.kv_math import ModelSpec, get_spec, kv_bytes_per_token, list_specs, num_kv_blocks  # noqa: E402

__version__ = "0.1.0"

__all__ = ["ModelSpec", "get_spec", "kv_bytes_per_token", "list_specs", "num_kv_blocks", "device"]


def device() -> str:
    """'cuda' when a CUDA GPU is visible, else 'cpu'. Notebooks use it to pick where tensors live."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
