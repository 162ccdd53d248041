"""Measured decode steps beside the roofline's prediction: :func:`measure_decode_steps` (notebook 07).

An experiment over a running engine: synthetic prompts for each (batch size, context length), the engine's
own timeline read back, and ``engine.step_model``'s roofline (``step_cost``, ``predict_step_seconds``) for
the same steps. ``viz.engine.fig_step_time`` draws the rows.
"""

from __future__ import annotations

from statistics import median

from paged_lab._checks import check_int
from paged_lab.engine.params import SamplingParams
from paged_lab.engine.step_model import MachineProbe, predict_step_seconds, step_cost


def measure_decode_steps(llm, probe: MachineProbe, batch_sizes=(1, 4, 16), context_lens=(16, 128),
                         max_tokens: int = 6, rounds: int = 3, progress: bool = True) -> list[dict]:
    """Run ``llm`` on synthetic prompts for each (batch size, context length) and read its own step
    timeline: the median of its pure decode steps, beside the roofline's prediction for them.

    Each shape runs ``rounds`` times, the shapes taking turns (1, 4, 16, 1, 4, 16, ...). Why: when
    other work shares the machine for a few seconds, it then slows a step of every shape alike, and
    the comparison between shapes (is 8 sequences far from 8x one?) still holds. A progress bar counts
    the runs (``progress=False``: none)."""
    from tqdm.auto import tqdm

    sp = SamplingParams(temperature=0, max_tokens=check_int("max_tokens", max_tokens, minimum=2),
                        ignore_eos=True)
    shapes = [(ctx, bs) for ctx in context_lens for bs in batch_sizes]
    decodes: dict[tuple[int, int], list[dict]] = {shape: [] for shape in shapes}
    rounds = check_int("rounds", rounds, minimum=1)
    with tqdm(total=rounds * len(shapes), desc="decode steps", unit="run", disable=not progress) as bar:
        for _ in range(rounds):
            for ctx, bs in shapes:
                bar.set_postfix_str(f"{bs} seqs x {ctx} tokens")
                start = llm.scheduler.step_count  # (the timeline keeps the latest rows: select by step)
                # distinct prompts (no prefix-cache hits), token ids well inside any vocabulary
                llm.generate([{"prompt_token_ids": [1 + (7 * i + 13 * j) % 997 for j in range(ctx)]}
                              for i in range(bs)],
                             sp, use_tqdm=False)
                decodes[ctx, bs] += [t for t in llm.timeline
                                     if t["step"] > start and t["num_prefill"] == 0 and t["num_decode"] == bs]
                bar.update(1)
    rows = []
    for ctx, bs in shapes:
        steps = decodes[ctx, bs]
        per_run = len(steps) // rounds
        mid = steps[per_run // 2]  # the middle decode step of a run: its bytes and FLOPs
        cost = step_cost(llm.spec, mid["num_batched_tokens"], mid["num_context_tokens"], llm.dtype)
        rows.append({"batch_size": bs, "context_len": ctx, "measured_s": median(t["seconds"] for t in steps),
                     "predicted_s": predict_step_seconds(cost, probe), "bytes": cost.bytes,
                     "flops": cost.flops})
    return rows
