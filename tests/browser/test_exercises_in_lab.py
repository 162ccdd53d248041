"""The exercises the way a learner does them: JupyterLab in headless Chromium, in the learner copies.

`make exercises` writes the copies into the served folder (``exercises/``), as ``make lab`` does. For one
exercise per notebook the test opens the copy and, in its "Do it yourself" section,
- runs the section's import cell, then the stub and its check: the check says "not written yet";
- types a wrong body into the solution cell (select all, type), runs it and the check, and reads the
  feedback: ✗, the failing call, expected vs yours and a hint, and no trace of the solution;
- types the reference solution (the committed notebook's cell), runs both again, and reads ✓.
Only the exercise cells run (not the whole notebook), so the seven notebooks take about a minute.
"""

from __future__ import annotations

import subprocess
import sys

import nbformat
import pytest
from labkit import PANEL_READY, ROOT, budget, notebooks_dir

pytestmark = pytest.mark.browser

SERIES = [p for p in budget.discover(notebooks_dir()) if not p.name.startswith("00")]

# A plausible slip per notebook, in the first exercise of its section.
WRONG = {
    "01": ("kv_bytes_per_token", "def kv_bytes_per_token(spec, dtype):\n"
           "    return 2 * spec.num_layers * spec.num_heads * spec.head_dim * DTYPE_BYTES[dtype]"),
    "02": ("utilization", "def utilization(regions):\n"
           "    return sum(t / r for t, r in regions) / len(regions) if regions else 0.0"),
    "03": ("blocks_needed", "def blocks_needed(n_tokens, block_size):\n    return n_tokens // block_size"),
    "04": ("append_action", "def append_action(num_tokens, block_size, refcount):\n"
           "    return \"new block\" if num_tokens % block_size == 0 else \"write in place\""),
    "05": ("admit", "def admit(prompt_lens, num_free_blocks, max_num_seqs, block_size):\n"
           "    admitted = []\n"
           "    for i, n in enumerate(prompt_lens):\n"
           "        if len(admitted) < max_num_seqs and -(-n // block_size) <= num_free_blocks:\n"
           "            admitted.append(i)\n"
           "            num_free_blocks -= -(-n // block_size)\n"
           "    return admitted"),
    "06": ("decode_attention", "def decode_attention(q, k_cache, v_cache, block_table, context_len, scale):\n"
           "    k = k_cache[block_table.long()].flatten(0, 1)[:context_len]\n"
           "    v = v_cache[block_table.long()].flatten(0, 1)[:context_len]\n"
           "    g = q.shape[0] // k.shape[1]\n"
           "    k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)\n"
           "    return torch.einsum('hk,khd->hd', torch.einsum('hd,khd->hk', q, k).softmax(-1), v)"),
    "07": ("query_start_loc", "def decodes_first(chunks):\n    return list(chunks)\n\n\n"
           "def query_start_loc(chunks, block_size):\n"
           "    starts = [0]\n"
           "    for _, start, end in chunks:\n"
           "        starts.append(starts[-1] + end - start)\n"
           "    return starts"),
    "08": ("cache_bytes_per_token", "def cache_bytes_per_token(spec, dtype):\n"  # forgets MLA's latent
           "    return 2 * spec.num_layers * spec.num_kv_heads * spec.head_dim * kv_math.dtype_bytes(dtype)"),
    "09": ("kv_bytes_per_token_per_gpu",
           "def kv_bytes_per_token_per_gpu(spec, dtype, tensor_parallel_size):\n"
           "    heads = spec.num_kv_heads // tensor_parallel_size\n"  # splits past one head, forgets MLA
           "    return 2 * spec.num_layers * heads * spec.head_dim * kv_math.dtype_bytes(dtype)"),
    "10": ("accepted_prefix", "def accepted_prefix(draft_token_ids, target_token_ids):\n"  # every agreement
           "    return sum(d == t for d, t in zip(draft_token_ids, target_token_ids))"),
}

# Run one cell (by index) and wait for it: resolves once the kernel has answered.
RUN_CELL = """async (i) => {
  const app = window.jupyterapp, panel = app.shell.currentWidget;
  panel.content.activeCellIndex = i;
  panel.content.deselectAll();
  await app.commands.execute('notebook:run-cell');
  const cell = panel.content.widgets[i];
  return {count: cell.model.executionCount,
          errors: cell.model.outputs.toJSON().filter((o) => o.output_type === 'error').map((o) => \
o.ename + ': ' + o.evalue)};
}"""

FEEDBACK = """(i) => {
  const node = \
window.jupyterapp.shell.currentWidget.content.widgets[i].node.querySelector('.paged-lab-check');
  return node ? {passed: node.dataset.passed, text: node.innerText} : null;
}"""

SOURCE = "(i) => window.jupyterapp.shell.currentWidget.content.widgets[i].model.sharedModel.getSource()"


def _tags(cell):
    return cell.get("metadata", {}).get("tags", [])


@pytest.fixture(scope="module")
def served_exercises(lab_server):
    """`make exercises` into the folder the lab serves, as `make lab` does before it starts."""
    out = lab_server.root_dir / "exercises"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "make_exercises.py"), "--out", str(out)],
                   check=True, capture_output=True)
    return out


def _section(path):
    """Indices of the section's import cell, the first exercise's solution cell, cells given with it,
    and its check cell; and the reference solution's source."""
    cells = nbformat.read(path, as_version=4).cells
    imports = next(i for i, c in enumerate(cells) if c.cell_type == "code" and "exercise" in _tags(c))
    solution = next(i for i, c in enumerate(cells) if "solution" in _tags(c))
    check = next(i for i in range(solution, len(cells)) if "grade" in _tags(cells[i]))
    return imports, solution, list(range(solution + 1, check)), check, cells[solution].source


def _type_into(page, index: int, source: str) -> None:
    """Select the cell's text and type ``source`` over it, as a learner editing the cell."""
    page.locator(".jp-Notebook .jp-Cell").nth(index).locator(".cm-content").click()
    page.keyboard.press("Control+a")
    page.keyboard.insert_text(source)
    typed = page.evaluate(SOURCE, index)
    assert typed.strip() == source.strip(), f"the editor holds {typed!r}, not what was typed"


def _run(page, index: int) -> None:
    result = page.evaluate(RUN_CELL, index)
    assert result["count"] is not None and not result["errors"], f"cell {index}: {result}"


def _grade(page, indices, check: int) -> dict:
    for i in indices:
        _run(page, i)
    _run(page, check)
    page.wait_for_function(f"() => ({FEEDBACK})({check}) !== null", timeout=30_000)
    return page.evaluate(FEEDBACK, check)


@pytest.mark.parametrize("path", SERIES, ids=[p.stem for p in SERIES])
def test_an_exercise_wrong_then_right(path, lab_server, served_exercises, page):
    name, wrong = WRONG[path.name[:2]]
    imports, solution, given, check, right = _section(path)
    assert f"def {name}(" in right, f"{path.name}: the first exercise is no longer {name}"
    page.goto(lab_server.notebook_url(f"exercises/{path.name}"))
    page.wait_for_function(PANEL_READY, timeout=90_000)
    try:
        _run(page, imports)
        stub = _grade(page, [solution, *given], check)
        assert stub["passed"] == "false" and "not written yet" in stub["text"] and "Hint:" in stub["text"]

        _type_into(page, solution, wrong)
        fb = _grade(page, [solution, *given], check)
        assert fb["passed"] == "false" and fb["text"].startswith(f"✗ {name}: not yet"), fb
        assert "expected:" in fb["text"] and "yours:" in fb["text"] and "Hint:" in fb["text"], fb
        assert f"{name}(" in fb["text"]  # the failing call, with its arguments
        body = [ln.strip() for ln in right.split("\n")[2:] if ln.strip()]
        assert not any(ln in fb["text"] for ln in body), "the feedback gave the solution away"

        _type_into(page, solution, right)
        fb = _grade(page, [solution, *given], check)
        assert fb["passed"] == "true" and fb["text"].startswith(f"✓ {name}"), fb
        assert not page.problems, page.problems
    finally:
        page.evaluate("() => window.jupyterapp.shell.currentWidget.sessionContext.shutdown()")
