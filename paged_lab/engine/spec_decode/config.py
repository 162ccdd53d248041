"""The speculative-decoding config, in vLLM's shape (``vllm/config/speculative.py``, ``SpeculativeConfig``).

    LLM(..., speculative_config={"method": "ngram", "num_speculative_tokens": 3,
                                 "prompt_lookup_max": 4, "prompt_lookup_min": 2})

Only the n-gram method runs here (no draft model to load). The checks and defaults are vLLM's: both
lookups unset -> 5 and 5; one set -> the other takes its value; ``prompt_lookup_min <= prompt_lookup_max``.
"""

from __future__ import annotations

from dataclasses import dataclass

from paged_lab._checks import check_int

KEYS = ("method", "num_speculative_tokens", "prompt_lookup_max", "prompt_lookup_min")
DEFAULT_LOOKUP = 5  # vLLM's default for both lookups when neither is given (config/speculative.py)


@dataclass(frozen=True)
class SpeculativeConfig:
    """A checked n-gram speculation config: draft up to ``num_speculative_tokens`` tokens per step from the
    longest n-gram (``prompt_lookup_min`` <= n <= ``prompt_lookup_max``) that recurs in the request."""

    num_speculative_tokens: int
    prompt_lookup_max: int = DEFAULT_LOOKUP
    prompt_lookup_min: int = DEFAULT_LOOKUP
    method: str = "ngram"

    @classmethod
    def of(cls, config) -> SpeculativeConfig | None:
        """``config``: None (no speculation), a SpeculativeConfig, or vLLM's dict. Raises ValueError naming
        the key that is wrong (an unknown key, a method other than "ngram", a count below 1, min > max)."""
        if config is None or isinstance(config, SpeculativeConfig):
            return config
        if not isinstance(config, dict):
            raise ValueError(
                f"speculative_config must be a dict like {{'method': 'ngram', "
                f"'num_speculative_tokens': 3}} or None, got {type(config).__name__}"
            )
        unknown = sorted(set(config) - set(KEYS))
        if unknown:
            raise ValueError(
                f"speculative_config: unknown key(s) {unknown}; the n-gram method takes {list(KEYS)}"
            )
        method = config.get("method", "ngram")
        if method != "ngram":
            raise ValueError(
                f"speculative_config['method'] must be 'ngram' (the only method without a draft "
                f"model), got {method!r}"
            )
        if config.get("num_speculative_tokens") is None:
            raise ValueError("speculative_config['num_speculative_tokens'] must be given (an integer >= 1)")
        k = check_int(
            "speculative_config['num_speculative_tokens']", config["num_speculative_tokens"], minimum=1
        )
        hi, lo = (
            None
            if config.get(key) is None
            else check_int(f"speculative_config[{key!r}]", config[key], minimum=1)
            for key in ("prompt_lookup_max", "prompt_lookup_min")
        )
        if hi is None and lo is None:
            hi = lo = DEFAULT_LOOKUP
        hi, lo = (
            (lo if hi is None else hi),
            (hi if lo is None else lo),
        )  # one given: the other takes its value
        if lo > hi:
            raise ValueError(f"speculative_config: prompt_lookup_min={lo} must be <= prompt_lookup_max={hi}")
        return cls(k, hi, lo)
