"""The paged engine on a real model, in vLLM's shape.

    from paged_lab import LLM, SamplingParams   # (the same names as paged_lab.engine.LLM, ...)
    llm = LLM("smollm2-135m")
    out = llm.generate(["The capital of France is"], SamplingParams(temperature=0, max_tokens=8))
    out[0].outputs[0].text
"""

from paged_lab.engine.attention import AttentionMetadata
from paged_lab.engine.config import EngineConfig
from paged_lab.engine.engine import LLM
from paged_lab.engine.kv_cache import KVCache
from paged_lab.engine.llama import PagedLlama
from paged_lab.engine.params import CompletionOutput, RequestOutput, SamplingParams

__all__ = ["LLM", "EngineConfig", "SamplingParams", "RequestOutput", "CompletionOutput", "PagedLlama",
           "AttentionMetadata", "KVCache"]
