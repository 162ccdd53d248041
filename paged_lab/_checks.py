"""The argument checks: the one integer validator (every argument that must be a whole number goes through
it), the keys a config must have, and positive finite sizes.

``bool`` is refused although Python counts it as an int (``max_num_seqs=True`` is a bug, not 1);
numpy integers are accepted and returned as plain ``int``.
"""

from __future__ import annotations

import math
from array import array
from numbers import Integral


def check_int(name: str, value, minimum: int | None = None, maximum: int | None = None,
              error: type[Exception] = ValueError) -> int:
    """Return ``value`` as an int, or raise ``error`` naming ``name`` and the limit it broke.

    >>> check_int("max_num_seqs", 4, minimum=1)
    4
    """
    # (a plain int first: simulate() checks two per request, and the Integral check is an ABC's)
    is_int = type(value) is int or (isinstance(value, Integral) and not isinstance(value, bool))
    if is_int and (minimum is None or value >= minimum) and (maximum is None or value <= maximum):
        return int(value)
    limits = [f"{op} {limit}" for op, limit in ((">=", minimum), ("<=", maximum)) if limit is not None]
    raise error(f"{name} must be an integer {' and '.join(limits)}".rstrip() + f", got {value!r}")


def check_keys(name: str, mapping, keys, error: type[Exception] = ValueError) -> None:
    """Raise ``error`` naming the keys ``mapping`` lacks (or holds as None), not a bare KeyError.

    >>> check_keys("config", {"hidden_size": 64}, ("hidden_size",))
    """
    lacking = [k for k in keys if mapping.get(k) is None]
    if lacking:
        raise error(f"{name}: lacks {', '.join(map(repr, lacking))}; it needs {', '.join(map(repr, keys))}")


def check_token_ids(name: str, token_ids, error: type[Exception] = ValueError) -> list[int]:
    """Return ``token_ids`` as a list of ints, or raise ``error`` naming the first one that is not.
    (The memory manager only hashes them; the engine checks them against the vocabulary.)

    >>> check_token_ids("prompt_token_ids", [1, 2, 3])
    [1, 2, 3]
    """
    ids = token_ids if type(token_ids) is list else list(token_ids)
    if len(ids) == 1 and type(ids[0]) is int:  # a decode's one token (every step): no array to build
        return ids
    try:
        array("q", ids)  # one C loop that refuses what is not an integer (a prompt is checked per admission)
        return ids
    except (TypeError, OverflowError):  # say which one
        return [check_int(f"{name}[{i}]", t, error=error) for i, t in enumerate(ids)]


def check_positive(name: str, value: float) -> None:
    """Raise ValueError naming ``name`` unless ``value`` is a size or count: a positive, finite number
    (``inf`` bytes of memory is a typo, not a plan)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
        raise ValueError(f"{name} must be a positive number, got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")
