"""The vLLM-shaped front door: ``from paged_lab import LLM, SamplingParams``, and no
torch on a plain import."""

import subprocess
import sys

import pytest


@pytest.mark.parametrize("module", ["paged_lab", "paged_lab.kv_math"])
def test_importing_the_package_or_kv_math_loads_no_torch(module):
    code = f"import sys, {module}; print(sorted(m for m in ('torch', 'triton') if m in sys.modules))"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip() == "[]"


def test_the_engine_names_load_on_first_use():
    code = ("import sys, paged_lab; before = 'torch' in sys.modules\n"
            "from paged_lab import LLM, SamplingParams\n"
            "from paged_lab.engine import LLM as E\n"
            "import os; print(before, LLM is E, SamplingParams.__name__, os.environ.get('TRITON_INTERPRET'))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    before, same, name, interpret = res.stdout.split()
    assert (before, same, name) == ("False", "True", "SamplingParams")
    import torch

    if not torch.cuda.is_available():  # loading the kernels (with the engine) set the interpreter default
        assert interpret == "1"
    with pytest.raises(AttributeError, match="no attribute 'NoSuchThing'"):
        import paged_lab

        paged_lab.NoSuchThing  # noqa: B018


# A script written against vLLM's API (https://docs.vllm.ai, "Offline Inference"). MODEL is set by the
# caller: a hub id for vLLM, the offline default for paged_lab. Notebook 07 ends with the same script.
VLLM_SCRIPT = """
from vllm import LLM, SamplingParams

prompts = ["The capital of France is", "def fibonacci(n):"]
sampling_params = SamplingParams(temperature=0, max_tokens=8)
llm = LLM(model=MODEL)
outputs = llm.generate(prompts, sampling_params)
for output in outputs:
    print(repr(output.prompt), "->", repr(output.outputs[0].text))
text, token_ids = outputs[0].outputs[0].text, outputs[0].outputs[0].token_ids
"""


@pytest.mark.slow
def test_a_vllm_script_runs_with_only_the_import_line_switched(smollm2, capsys):
    script = VLLM_SCRIPT.replace("from vllm import", "from paged_lab import")
    assert script.count("\n") == VLLM_SCRIPT.count("\n") and script != VLLM_SCRIPT
    scope = {"MODEL": "smollm2-135m"}
    exec(script, scope)
    tok = smollm2[1]
    assert 1 <= len(scope["token_ids"]) <= 8 and all(isinstance(t, int) for t in scope["token_ids"])
    assert scope["text"] == tok.decode(scope["token_ids"], skip_special_tokens=True)
    assert "'The capital of France is' ->" in capsys.readouterr().out
