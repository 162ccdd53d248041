"""One exercise, as a notebook's module declares it, and how its values are shown and compared.

An ``Exercise`` names the function a learner writes and says where the right answer comes from:
``expected`` asks the package's own code, ``real`` names the package code that does what is asked,
shown as the solution (on request only), ``cases`` are tried first and ``strategy`` builds the
hypothesis inputs after them. ``nb01.py`` ... ``nb07.py`` each declare their notebook's exercises as
a tuple ``EXERCISES``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from paged_lab import kv_math


def _equal(want, got) -> bool:
    return want == got


def shown_value(value) -> str:
    """Short, readable values: a model by the fields that matter, a tensor by shape and values."""
    if isinstance(value, kv_math.ModelSpec):
        return (f"ModelSpec(num_layers={value.num_layers}, num_heads={value.num_heads}, "
                f"num_kv_heads={value.num_kv_heads}, head_dim={value.head_dim}, "
                f"num_params={value.num_params:_})")
    if hasattr(value, "shape") and hasattr(value, "tolist") and tuple(value.shape) == ():
        return shown_value(value.item())  # a numpy or torch scalar (numpy.int64(64)): the number, 64
    if hasattr(value, "shape") and hasattr(value, "tolist"):
        flat = value.flatten().tolist()
        vals = ", ".join(f"{v:.4g}" for v in flat[:8]) + (", ..." if len(flat) > 8 else "")
        return f"tensor(shape={list(value.shape)}, [{vals}])"
    if isinstance(value, float):
        return f"{value:.6g}"
    return repr(value)


@dataclass(frozen=True)
class Exercise:
    name: str  # the function the learner writes
    params: tuple[str, ...]
    expected: Callable[..., Any]  # the real implementation's answer for the same arguments
    cases: tuple[tuple, ...]  # fixed arguments, tried first
    strategy: Callable[[], Any]  # builds a hypothesis strategy of argument tuples (lazily)
    hint: str
    real: str  # "module:qualname" of the package code that does what is asked (shown only when asked)
    same: Callable[[Any, Any], bool] = _equal  # whether the learner's answer is the expected one
    fmt: Callable[[Any], str] = shown_value  # how an argument or an answer is shown


def close(want, got) -> bool:
    """A float or a tensor answer: equal up to rounding (a float's 1e-9, a tensor's 1e-4)."""
    if isinstance(want, float):
        return isinstance(got, (int, float)) and math.isclose(want, got, rel_tol=1e-9, abs_tol=1e-12)
    import torch

    got = torch.as_tensor(got)
    return got.shape == want.shape and torch.allclose(got.float(), want.float(), atol=1e-4, rtol=1e-4)
