"""Does a long-lived LLM grow? Memory kept and stats() / latency() time as the requests it served grow.

generate() calls of 5 small requests (6 prompt tokens, 4 output tokens, greedy) on a 2-layer random Llama
(tests/test_engine_phases.py's). Prints, for each window of 1,000 requests, the floor of the traced memory
(tracemalloc, sampled after gc every 10 calls: the block-event logs' saw-tooth between EVENTS_KEPT and twice
that is left out), then, in a second engine without tracemalloc, stats() and latency() after 5 and after
2,000 requests (best of 5).

    .venv/bin/python benchmarks/long_lived_engine.py              # 4,000 requests
    .venv/bin/python benchmarks/long_lived_engine.py --calls 1600  # 8,000
"""

from __future__ import annotations

import argparse
import gc
import time
import tracemalloc


def tiny_engine():
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from paged_lab.engine import LLM

    class Tok:
        eos_token_id = None

        def decode(self, ids, skip_special_tokens=True):
            return " ".join(map(str, ids))

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16, tie_word_embeddings=False,
                      max_position_embeddings=256)
    return LLM(LlamaForCausalLM(cfg).eval(), tokenizer=Tok(), block_size=4, num_kv_blocks=64,
               attention_backend="torch")


def call(llm, i: int) -> None:
    from paged_lab.engine import SamplingParams

    llm.generate([{"prompt_token_ids": [(i * 5 + j) % 90 + 1, 6, 7, 8, 9, 10]} for j in range(5)],
                 SamplingParams(temperature=0, max_tokens=4, ignore_eos=True), use_tqdm=False)


def best_ms(f, n: int = 5) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return 1e3 * min(times)


def memory_floors(calls: int) -> None:
    tracemalloc.start()
    llm, floor = tiny_engine(), None
    for i in range(calls):
        call(llm, i)
        if i % 10 == 9:
            gc.collect()
            m = tracemalloc.get_traced_memory()[0]
            floor = m if floor is None else min(floor, m)
        if (i + 1) % 200 == 0:
            n = 5 * (i + 1)
            print(f"requests {n - 999:5d}-{n:5d}: traced memory floor {floor / 1e6:.3f} MB")
            floor = None
    tracemalloc.stop()


def stats_time() -> None:
    llm = tiny_engine()
    call(llm, 0)
    print(f"after     5 requests: stats() {best_ms(llm.stats):.2f} ms, "
          f"latency() {best_ms(llm.latency):.2f} ms")
    for i in range(1, 400):
        call(llm, i)
    print(f"after 2,000 requests: stats() {best_ms(llm.stats):.2f} ms, "
          f"latency() {best_ms(llm.latency):.2f} ms")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=800, help="generate() calls of 5 requests (default 800)")
    args = ap.parse_args()
    memory_floors(args.calls)
    stats_time()
