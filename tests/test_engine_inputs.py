"""The engine's request checks use the Scheduler's pool-fit rule (``Scheduler.never_fits``): generate()
rejects, before any work, exactly the requests the Scheduler could never admit. No model needed."""

import pytest

from paged_lab.engine import SamplingParams
from paged_lab.engine.inputs import InputProcessor
from paged_lab.memory import BlockManager
from paged_lab.sched import RequestTooLargeError, Scheduler, Sequence


@pytest.mark.parametrize("num_blocks,block_size", [(2, 4), (3, 5), (6, 1)])
def test_the_engine_rejects_exactly_what_the_scheduler_never_admits(num_blocks, block_size):
    sched = Scheduler(BlockManager(num_blocks, block_size), max_num_seqs=1)
    inputs = InputProcessor(tokenizer=None, vocab_size=10, max_model_len=1000, scheduler=sched)
    slots = num_blocks * block_size
    verdicts = set()
    for n in range(1, slots + 3):
        for m in range(1, slots + 3):
            try:
                sched.add_request(Sequence(f"{n}/{m}", [1] * n, m))
                scheduler_says = None
            except RequestTooLargeError as err:
                scheduler_says = str(err).split(":")[0]  # the argument it names
            try:
                inputs.process({"prompt_token_ids": [1] * n}, SamplingParams(max_tokens=m))
                engine_says = None
            except ValueError as err:
                engine_says = "max_tokens" if "max_tokens (" in str(err) else "prompt_token_ids"
                assert str(err).startswith("prompts[0]: ") and str(num_blocks) in str(err)
            assert engine_says == scheduler_says, (n, m)
            verdicts.add(engine_says)
    assert verdicts == {None, "prompt_token_ids", "max_tokens"}  # the grid reaches every answer


def test_the_pool_messages_name_the_limit():
    sched = Scheduler(BlockManager(2, 4), max_num_seqs=1)
    inputs = InputProcessor(tokenizer=None, vocab_size=10, max_model_len=1000, scheduler=sched)
    with pytest.raises(ValueError,
                       match=r"prompt has 9 tokens but one sequence can hold at most 8 "
                             r"\(num_blocks=2 x block_size=4\)"):
        inputs.process({"prompt_token_ids": [1] * 9}, None)
    with pytest.raises(ValueError, match=r"prompt \(5 tokens\) \+ max_tokens \(5\) needs up to 9 KV slots "
                                         r"but one sequence can hold at most 8 "
                                         r"\(num_blocks=2 x block_size=4\); lower max_tokens to <= 4"):
        inputs.process({"prompt_token_ids": [1] * 5}, SamplingParams(max_tokens=5))
    assert sched.never_fits(5, 4) is None  # 5 + 4 - 1 = 8 slots: exactly the pool
