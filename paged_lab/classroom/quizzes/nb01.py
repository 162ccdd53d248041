"""The quiz of notebook 01 · KV-cache size math. Every number comes from ``paged_lab.kv_math``."""

from __future__ import annotations

from paged_lab.classroom.quiz import Choice, NumberQuestion, Question, Quiz
from paged_lab.kv_math import DTYPE_BYTES, GB, get_spec, human_bytes, plan_capacity


def quiz(gpu_gb: int, context: int) -> Quiz:
    """The quiz for a GPU of ``gpu_gb`` GB and requests of ``context`` tokens (the
    notebook's GPU_GB, CONTEXT)."""
    l8b, llama, l70_spec = get_spec("llama-3.1-8b"), get_spec("llama-3.2-1b"), get_spec("llama-3.1-70b")
    gpu = gpu_gb * GB
    bf16 = plan_capacity(l8b, gpu, context, dtype="bfloat16", weight_dtype="bfloat16")
    fp8 = plan_capacity(l8b, gpu, context, dtype="fp8", weight_dtype="bfloat16")
    fp8_token, bf16_token = l8b.kv_bytes_per_token("fp8"), l8b.kv_bytes_per_token("bfloat16")
    fp8_tokens = fp8.kv_budget_bytes // fp8_token
    only_k = fp8.kv_budget_bytes // (fp8_token // 2) // context          # K or V, not both
    all_heads = fp8.kv_budget_bytes // l8b.as_mha().kv_bytes_per_token("fp8") // context
    l70 = plan_capacity(l70_spec, gpu, context)
    l70_token = l70_spec.kv_bytes_per_token("bfloat16")
    l70_in_8b_budget = bf16.kv_budget_bytes // l70_token
    per_token, as_mha = llama.kv_bytes_per_token("bfloat16"), llama.kv_bytes_per_token_mha("bfloat16")
    one_request = llama.kv_bytes(context, "bfloat16")
    bf16_bytes = DTYPE_BYTES["bfloat16"]

    return Quiz([
        NumberQuestion(
            f"Llama-3.1-8B ({l8b.num_layers} layers, {l8b.num_kv_heads} KV heads, head_dim {l8b.head_dim}) "
            f"on one {gpu_gb} GB GPU, with bf16 weights, leaves {fp8.kv_budget_bytes:,} bytes for the KV "
            f"cache. With an fp8 cache (1 byte per number), how many {context:,}-token requests fit at once?",
            answer=fp8.max_seqs, source=plan_capacity,
            explanation=f"In fp8 one token costs 2 × {l8b.num_layers} × {l8b.num_kv_heads} × {l8b.head_dim} "
                        f"× 1 = {fp8_token:,} bytes, half of bf16's {bf16_token:,}: {fp8.kv_budget_bytes:,} "
                        f"// {fp8_token:,} = {fp8_tokens:,} tokens, and {fp8_tokens:,} // {context:,} = "
                        f"{fp8.max_seqs} requests, about twice the {bf16.max_seqs} of a bf16 cache. The "
                        f"weights still take {fp8.weight_bytes / GB:.1f} GB: only the cache was quantized.",
            too_low="Count the bytes of one token in fp8: K and V, in every layer, for every KV head, "
                    f"head_dim numbers of 1 byte each. Divide the budget by it, then by {context:,} "
                    "tokens per request.",
            too_high=f"Each request needs {context:,} tokens, and each token K and V in every layer and KV "
                     "head. Divide the budget by the bytes of one whole request, and count "
                     "whole requests only.",
            mistakes={
                bf16.max_seqs: f"That is what fits with a bf16 cache, {bf16_token:,} bytes per token. fp8 "
                               "keeps the same numbers in 1 byte instead of 2.",
                only_k: "That counts K or V, not both: every layer keeps a key and a value vector per KV "
                        "head, the factor 2 in the formula.",
                all_heads: f"That stores all {l8b.num_heads} query heads. The cache keeps K and V only for "
                           f"the {l8b.num_kv_heads} KV heads (GQA).",
                fp8_tokens: f"That is how many tokens fit. Each request needs {context:,} of them.",
            },
        ),
        Question(
            f"Llama-3.2-1B has {llama.num_heads} query heads but only {llama.num_kv_heads} KV heads (GQA). "
            "Why does that save KV memory, although no query head was removed?",
            [Choice("GQA stores each query head in fewer bits",
                    f"GQA changes no number format: in bf16 every stored number still takes {bf16_bytes} "
                    "bytes. What changes is how many K and V heads are stored per token."),
             Choice("The query heads share one softmax",
                    "Every query head still computes its own scores and its own softmax; sharing one would "
                    "make them a single head. GQA shares what is stored, not what is computed."),
             Choice("Only K and V are cached, and each KV head serves several query heads",
                    f"{human_bytes(per_token)} per token instead of {human_bytes(as_mha)} as MHA: "
                    f"{llama.group_size} query heads read the same K and V head. A query is used once, by "
                    "the token that produced it, so it is never cached."),
             Choice("Each query head attends to fewer of the earlier tokens",
                    f"Every query head still attends to every earlier token. GQA lets {llama.group_size} "
                    "query heads read the same keys and values; it drops no token.")],
            answer=2,
        ),
        Question(
            f"Llama-3.1-70B in bf16 on one {gpu_gb} GB GPU: how many tokens of KV cache fit? (Try it in the "
            "playground.)",
            [Choice(f"{bf16.max_tokens:,}, as many as for Llama-3.1-8B",
                    f"That is Llama-3.1-8B's count: its {bf16.weight_bytes / GB:.1f} GB of weights leave "
                    f"{bf16.kv_budget_bytes / GB:.1f} GB for the cache. What fits depends on what this "
                    "model's own weights leave."),
             Choice(f"{l70.max_tokens:,}: its weights alone need more than the card",
                    f"Its {l70_spec.num_params / 1e9:.1f} B parameters need {l70.weight_bytes / GB:.0f} GB "
                    f"in bf16, more than the {gpu_gb} GB card: the KV budget is zero before a single token. "
                    "Serving it takes more GPUs or smaller (quantized) weights."),
             Choice(f"About {l70_in_8b_budget:,}: each of its tokens costs "
                    f"{l70_token / bf16_token:.1f}× the bytes",
                    f"Its tokens do cost {l70_token:,} B instead of {bf16_token:,} B, but dividing "
                    "Llama-3.1-8B's budget by that forgets the weights: the 70B model's own "
                    f"{l70.weight_bytes / GB:.0f} GB do not fit in {gpu_gb} GB."),
             Choice("It depends on the context length",
                    "The context length decides how many tokens one request needs, not how many fit: with no "
                    "memory left after the weights, not even one token fits.")],
            answer=1,
        ),
        Question(
            "Why does the KV cache grow with the context length while the weights do not?",
            [Choice("Longer contexts load extra layers",
                    f"The number of layers is fixed by the model ({llama.num_layers} for Llama-3.2-1B); a "
                    "longer context runs the same layers over more tokens."),
             Choice("The weights are compressed as the context grows",
                    "Nothing compresses the weights at run time: they take the same bytes for every request "
                    "and every length. What grows is the cache."),
             Choice("The cache keeps every token's attention scores, and the pairs of tokens multiply",
                    "Scores are computed and thrown away at every step (a cache of them would grow with the "
                    "square of the length). What is kept is one K and one V per token and layer: the cache "
                    f"grows linearly, {human_bytes(per_token)} a token."),
             Choice("Every token keeps its own K and V; the weights are one shared copy",
                    f"{human_bytes(per_token)} per token × {context:,} tokens = {human_bytes(one_request)} "
                    f"for one Llama-3.2-1B request of {context:,} tokens, and every request has its own; the "
                    "weights are loaded once and read by all of them.")],
            answer=3,
        ),
    ])
