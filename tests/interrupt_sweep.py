"""Interrupt generate() at every k-th executed line of paged_lab/memory/ and paged_lab/sched/, and check the
engine after each: the test in tests/test_engine_interrupt_sweep.py, and a script to count broken points.

    .venv/bin/python tests/interrupt_sweep.py --stride 7     # every 7th line; prints the broken points

A line is one ``sys.settrace`` "line" event in a frame whose file is under those folders. At the chosen line
the hook either raises ``KeyboardInterrupt`` right there (an exception from inside an operation: what Python
does when a SIGINT arrives with no handler deferring it, or what a bug raises) or sends this process a real
SIGINT (``sigint=True``), which the engine must hold until the step ends.
"""

from __future__ import annotations

import os
import signal
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import paged_lab

ROOT = Path(paged_lab.__file__).parent
TRACED = tuple(str(ROOT / d) + os.sep for d in ("memory", "sched"))


class LineHook:
    """A ``sys.settrace`` hook that counts the line events of frames in ``TRACED`` files and, at the
    ``at``-th (1-based; None: never), raises KeyboardInterrupt there or sends SIGINT (``sigint``)."""

    def __init__(self, at: int | None = None, sigint: bool = False):
        self.at, self.sigint, self.count, self.fired_in = at, sigint, 0, None

    def __call__(self, frame, event, arg):  # the global hook: trace only frames of the traced files
        return self._line if frame.f_code.co_filename.startswith(TRACED) else None

    def _line(self, frame, event, arg):
        if event != "line":
            return self._line
        self.count += 1
        if self.count == self.at:
            self.fired_in = f"{Path(frame.f_code.co_filename).name}:{frame.f_lineno} {frame.f_code.co_name}"
            if self.sigint:
                os.kill(os.getpid(), signal.SIGINT)
            else:
                raise KeyboardInterrupt(f"raised at {self.fired_in}")
        return self._line


def run_traced(fn, hook: LineHook):
    old = sys.gettrace()
    sys.settrace(hook)
    try:
        return fn()
    finally:
        sys.settrace(old)


@dataclass
class Case:
    """How to build one engine and what one generate() call asks of it."""

    name: str
    make: object  # () -> LLM
    prompts: list
    params: list


def tokens(llm, case: Case) -> list:
    outs = llm.generate(case.prompts, case.params, use_tqdm=False)
    return [[c.token_ids for c in out.outputs] for out in outs]


def count_lines(case: Case) -> int:
    """How many traced lines one uninterrupted generate() of ``case`` executes on a new engine."""
    hook = LineHook()
    llm = case.make()
    run_traced(lambda: tokens(llm, case), hook)
    return hook.count


def check_point(case: Case, at: int, fresh: list, sigint: bool = False) -> str | None:
    """Interrupt a new engine's generate() at traced line ``at``; None when the engine came out whole,
    else what was wrong. With ``sigint`` the KeyboardInterrupt must also come at a step boundary: never
    raised inside paged_lab/memory or paged_lab/sched."""
    llm = case.make()
    hook = LineHook(at, sigint)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # "generate() was interrupted ..."
        try:
            run_traced(lambda: tokens(llm, case), hook)
        except KeyboardInterrupt as err:
            if sigint and _raised_in_traced(err):
                return f"SIGINT at {hook.fired_in} raised inside {_raised_in_traced(err)}"
        except Exception as err:  # noqa: BLE001 - every way it breaks is a finding
            return f"the interrupted call raised {type(err).__name__}: {err}"
        else:
            if hook.fired_in is not None:
                return f"interrupted at {hook.fired_in}, but generate() returned"
        try:
            return _whole(llm, case, fresh)
        except Exception as err:  # noqa: BLE001
            return f"{type(err).__name__}: {err}"


def _raised_in_traced(err: BaseException) -> str | None:
    """The traced line the exception came through, if any (a deferred one comes from the step's end)."""
    tb, inside = err.__traceback__, None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename.startswith(TRACED):
            inside = f"{Path(tb.tb_frame.f_code.co_filename).name}:{tb.tb_lineno}"
        tb = tb.tb_next
    return inside


def _whole(llm, case: Case, fresh: list) -> str | None:
    """None when invariants hold, every block is free, stats() works and the next two calls equal a fresh
    engine's tokens."""
    llm.block_manager.check_invariants()
    if llm.block_manager.num_free_blocks != llm.num_blocks:
        return f"{llm.num_blocks - llm.block_manager.num_free_blocks} blocks still held"
    if llm.scheduler.has_unfinished():
        return "the scheduler still holds sequences"
    llm.stats()
    for i in range(2):
        if tokens(llm, case) != fresh:
            return f"call {i + 1} after the interrupt returned other tokens"
    llm.block_manager.check_invariants()
    if llm.block_manager.num_free_blocks != llm.num_blocks:
        return "blocks held after the next calls"
    llm.stats()
    return None


def sweep(case: Case, stride: int, first: int | None = None, sigint: bool = False) -> tuple[int, dict]:
    """(points tried, {line: what broke}) for the lines first, first + stride, ... of one generate()."""
    fresh = tokens(case.make(), case)
    total = count_lines(case)
    broken = {}
    points = range(first or stride, total + 1, stride)
    for at in points:
        why = check_point(case, at, fresh, sigint)
        if why is not None:
            broken[at] = why
    return len(points), broken


# ------------------------------------------------------------------------------------ the two engines
def plain_case() -> Case:
    """A 2-layer random Llama, "fork" parallel sampling with n = 2, prefix caching on, a pool small enough
    to preempt, chunked prefills."""
    sys.path.insert(0, str(Path(__file__).parent))
    from test_engine_phases import _tiny_llama, _Tok

    from paged_lab.engine import LLM, SamplingParams

    model = _tiny_llama()

    def make():
        return LLM(model, tokenizer=_Tok(), block_size=4, num_kv_blocks=14, max_num_seqs=4,
                   max_num_batched_tokens=8, attention_backend="torch", parallel_sampling="fork",
                   enable_prefix_caching=True)

    prompts = [{"prompt_token_ids": [5, 6, 7, 8, 9, 10, 11, 12, 13]}, {"prompt_token_ids": [20, 21, 22]},
               {"prompt_token_ids": [5, 6, 7, 8, 9, 10, 11, 12, 30, 31]}]
    params = [SamplingParams(n=2, temperature=1.0, seed=7, max_tokens=6, ignore_eos=True),
              SamplingParams(temperature=0, max_tokens=5, ignore_eos=True),
              SamplingParams(n=2, temperature=1.0, seed=1, max_tokens=4, ignore_eos=True)]
    return Case("plain", make, prompts, params)


def window_case() -> Case:
    """A 2-layer random Llama with a window of 8 on layer 0 (a HybridBlockManager), prefix caching on,
    n = 2 by prefix sharing, chunked prefills, a small pool."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from paged_lab.engine import LLM, SamplingParams
    from paged_lab.models import byte_tokenizer, sliding_window_variant

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                         max_position_embeddings=512, tie_word_embeddings=True, initializer_range=0.3)
    swa, tok = sliding_window_variant(LlamaForCausalLM(config).eval(), 8), byte_tokenizer()

    def make():
        return LLM(swa, tokenizer=tok, block_size=4, num_kv_blocks=20, max_num_seqs=4,
                   max_num_batched_tokens=8, attention_backend="torch", enable_prefix_caching=True)

    prompts = [{"prompt_token_ids": list(range(3, 19))}, {"prompt_token_ids": list(range(3, 15)) + [90, 91]},
               {"prompt_token_ids": [40, 41, 42]}]
    params = [SamplingParams(n=2, temperature=1.0, seed=2, max_tokens=6, ignore_eos=True),
              SamplingParams(temperature=0, max_tokens=6, ignore_eos=True),
              SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)]
    return Case("window", make, prompts, params)


def main() -> None:
    import argparse
    import time

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stride", type=int, default=7)
    ap.add_argument("--sigint", action="store_true", help="send SIGINT at the line instead of raising")
    ap.add_argument("--case", choices=["plain", "window", "both"], default="both")
    args = ap.parse_args()
    for make in (plain_case, window_case):
        case = make()
        if args.case not in (case.name, "both"):
            continue
        t0 = time.perf_counter()
        points, broken = sweep(case, args.stride, sigint=args.sigint)
        kinds = {why.split(" at ")[0] if "raised" in why else why for why in broken.values()}
        print(f"{case.name}: {len(broken)} of {points} points broken (stride {args.stride}, "
              f"{count_lines(case)} traced lines, {len(kinds)} distinct messages, "
              f"{time.perf_counter() - t0:.1f} s)")
        for at, why in list(broken.items())[:15]:
            print(f"  line {at}: {why[:160]}")


if __name__ == "__main__":
    main()
