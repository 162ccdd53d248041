"""generate()'s progress bar counts output tokens, so one long request moves it every step."""

import functools
import io

from test_engine_phases import _tiny_llama, _Tok  # the same 2-layer random Llama and id tokenizer
from tqdm import tqdm

from paged_lab.engine import LLM, SamplingParams

PROMPT = {"prompt_token_ids": [5, 6, 7, 8, 9]}


class RecordingBar(tqdm):
    """A real tqdm bar (written to a string) that keeps its count after every update."""

    made: list = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, file=io.StringIO(), **kwargs)
        self.counts = []
        RecordingBar.made.append(self)

    def update(self, n=1):
        super().update(n)
        self.counts.append(self.n)


def _generate(llm, prompts, sp):
    RecordingBar.made.clear()
    llm.generate(prompts, sp, use_tqdm=functools.partial(RecordingBar))
    (bar,) = RecordingBar.made
    return bar


def test_one_long_request_moves_the_bar_every_step():
    llm = LLM(_tiny_llama(), tokenizer=_Tok(), block_size=4, num_kv_blocks=16, attention_backend="torch")
    bar = _generate(llm, PROMPT, SamplingParams(temperature=0, max_tokens=6, ignore_eos=True))
    assert bar.total == 6 and bar.unit == "tok" and bar.counts == [1, 2, 3, 4, 5, 6]
    assert bar.postfix == "1/1 requests"
    first_two = " ".join(map(str, llm.generate(PROMPT, SamplingParams(temperature=0, max_tokens=2),
                                               use_tqdm=False)[0].outputs[0].token_ids))
    # a request that stops early (here at its 2nd token) counts as done: the bar ends full
    bar = _generate(llm, [PROMPT, PROMPT], SamplingParams(n=2, temperature=0, max_tokens=6, stop=first_two))
    assert bar.total == 2 * 2 * 6 and bar.counts[-1] == bar.total and len(bar.counts) == 2
