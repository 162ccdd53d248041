"""The quiz of notebook 05 · Continuous batching. The numbers are the notebook's simulations; the
chunked-prefill answer is simulated here, by the same Scheduler."""

from __future__ import annotations

from paged_lab.classroom.quiz import Choice, NumberQuestion, Question, Quiz, distinct_mistakes
from paged_lab.sim import paged, simulate, workloads


def quiz(*, rounds: list[int], windows: int, static_makespan: int, continuous_makespan: int, one_window: int,
         even_rounds: int, even_makespan: int, extra_prefill: dict[str, int], budget: int, long_prompt: int,
         mem_slots: int, mem_reserve: int, mem_windows: int, reserved_peak: int, paged_peak: int) -> Quiz:
    """``rounds``: the rounds each traveller of the windows story needs; ``windows``: how many windows;
    ``one_window``: the rounds with a single window; ``even_makespan``: the rounds when every traveller
    needs ``even_rounds``; ``extra_prefill``: tokens computed a second time by "recompute",
    "recompute, prefix caching on" and "swap"; ``reserved_peak``/``paged_peak``: the most requests running
    at once in section 4."""
    long_one = workloads.uniform(1, prompt_len=(long_prompt, long_prompt), output_len=(3, 3), seed=0)
    run = simulate(long_one, paged(64, 16), {"max_num_seqs": 4, "max_num_batched_tokens": budget})
    chunks = [n for n in run.timeline["prefill_tokens"] if n]
    full = long_prompt // budget
    longest = max(rounds)
    recompute, cached, swap = (extra_prefill[k] for k in ("recompute", "recompute, prefix caching on",
                                                          "swap"))

    return Quiz([
        Question(
            "With a single window, how many rounds do the six travellers take?",
            [Choice(f"{static_makespan} static, {continuous_makespan} continuous",
                    f"That is the run with {windows} windows. With one window nobody can overlap, so there "
                    "is no idle window to refill: both modes serve the travellers one after another."),
             Choice(f"{longest}",
                    f"{longest} rounds is what A alone needs. With one window nobody runs beside A: "
                    "everyone's rounds add up."),
             Choice(f"{one_window} in both modes",
                    f"{' + '.join(str(n) for n in rounds)} = {one_window}: with one window nobody can "
                    "overlap, so there is no idle window to refill, and static and continuous batching "
                    "do the same thing.")],
            answer=2,
        ),
        Question(
            f"If every traveller needed exactly {even_rounds} rounds, would continuous batching still win?",
            [Choice(f"Yes: {continuous_makespan} rounds against {static_makespan}",
                    f"That is the story's own workload, where A needs {longest} rounds and the others fewer. "
                    "With equal lengths a static batch finishes together and leaves no window idle."),
             Choice(f"No: {even_makespan} rounds either way",
                    "Batches of equal-length requests finish together, so static batching never leaves a "
                    "window idle; continuous batching wins when lengths differ, which in chat "
                    "traffic they do.")],
            answer=1,
        ),
        Question(
            f"In section 3, preemption by recompute computed {recompute} prompt and output tokens a second "
            "time. What does vLLM V1 do when a running request cannot get a block?",
            [Choice("Recompute only, finding its own freed full blocks in the prefix cache",
                    "V1 dropped swap. Freed blocks keep their content until they are handed out, so with "
                    f"prefix caching on the same run recomputes {cached} tokens instead of {recompute}. Swap "
                    f"(V0) computed {swap} twice but copies blocks to the CPU and back."),
             Choice("Swap its blocks to CPU memory, so that nothing is computed twice",
                    f"That is V0's other way, and vLLM V1 removed it: swap computed {swap} tokens twice "
                    "here, but copies blocks to the CPU and back over PCIe."),
             Choice("Reject the request with an out-of-memory error",
                    "No request is turned away or lost: the scheduler preempts a running request so that the "
                    "others keep going, and the victim runs again later with all its tokens."),
             Choice("Preempt the oldest running request, since it holds the most blocks and "
                    "frees the most memory",
                    "The scheduler preempts the most recently admitted running request, so the oldest always "
                    "makes progress and nobody deadlocks.")],
            answer=0,
            design="V1",
        ),
        NumberQuestion(
            f"vLLM V1 gives each step a budget of max_num_batched_tokens = {budget}. In how many steps is a "
            f"{long_prompt}-token prompt prefilled, when nothing else is running?",
            answer=len(chunks), source=simulate,
            explanation=f"{' + '.join(str(c) for c in chunks)} = {long_prompt}: ⌈{long_prompt} / {budget}⌉ = "
                        f"{len(chunks)} steps. The Scheduler splits the prompt over steps (chunked prefill), "
                        f"{budget} tokens at most per step, so one long prompt cannot stall everyone's "
                        "decode. (vLLM V1 also allocates the prompt's blocks chunk by chunk, as it is "
                        "computed; the paper's rule allocated them all at admission.)",
            too_low=f"Each step computes at most {budget} prompt tokens: count the steps until all "
                    f"{long_prompt} are done, the last one partly filled.",
            too_high="Prefill is not one token per step: each step computes as many prompt tokens as the "
                     f"budget allows, {budget}.",
            mistakes=distinct_mistakes(len(chunks), [
                (full, f"{full} steps of {budget} cover only {full * budget} of the {long_prompt} tokens: "
                       "the rest need a step of their own."),
                (1, f"One step would hold all {long_prompt} tokens; the budget allows {budget} per step."),
                (long_prompt, "Decode computes one token per step; prefill computes as many prompt tokens as "
                              "the budget allows."),
            ]),
            design="V1",
        ),
        Question(
            f"Same {mem_slots:,} slots, {mem_windows} windows: how many requests ran at once at most, with "
            f"{mem_reserve}-slot reservations and with paging?",
            [Choice(f"{paged_peak} either way",
                    f"The windows allow {mem_windows}, but {mem_reserve}-slot reservations use up the "
                    f"{mem_slots:,} slots after {reserved_peak} requests, however short they are: the memory "
                    "decides."),
             Choice(f"{reserved_peak} with reservations, {paged_peak} with paging",
                    f"Each admitted request blocks its reservation at once: {mem_slots:,} // {mem_reserve} = "
                    f"{reserved_peak}, however short the requests are, so the free windows have no memory to "
                    f"hand out. Paging fills all {paged_peak}."),
             Choice(f"{reserved_peak} either way: the memory is the same",
                    "The memory is the same, but paging hands out blocks as tokens arrive, so memory holds "
                    "tokens rather than promises and every window can be busy.")],
            answer=1,
        ),
    ])
