"""The zh-TW edition: one source (the English notebooks) plus a catalogue, checked like the English series.

- ``scripts/build_zh.py --check`` passes: no stale or missing translation, the committed zh-TW notebooks are
  what the generator writes (their code cells are the English ones);
- the staleness check works: change an English markdown cell in a copy and it names that cell;
- every quiz text of the series and every glossary term has a translation (the zh-TW notebooks' last cell
  checks the rest of what they show: figure titles, axis labels, readouts);
- ``paged_lab.viz.i18n`` translates at the few places text is shown, falls back to English, loads no torch.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import plotly.graph_objects as go
import pytest
from scriptkit import load_script

from paged_lab.classroom import glossary
from paged_lab.classroom.quiz import Choice, NumberQuestion, Question, Quiz
from paged_lab.kv_math import plan_capacity
from paged_lab.viz import i18n

ROOT = Path(__file__).resolve().parents[1]


def _load_build_zh():
    return load_script("scripts/build_zh.py")


build_zh = _load_build_zh()
ENGLISH = build_zh.english_notebooks()


@pytest.fixture
def zh():
    i18n.use("zh-TW")
    yield
    i18n.use("en")


# ---------------------------------------------------------------- the generated edition


@pytest.mark.parametrize("path", ENGLISH, ids=[p.stem for p in ENGLISH])
def test_every_english_notebook_has_a_current_translation(path):
    problems = [p.line() for p in build_zh.translation_problems(path) if p.kind != "ORPHAN"]
    assert not problems, "run `python scripts/build_zh.py --stale` and translate:\n" + "\n".join(problems)


def test_committed_zh_tw_notebooks_are_what_the_generator_writes():
    problems = [p.line() for p in build_zh.problems() if p.kind in ("OUT OF DATE", "ORPHAN") and not p.cell]
    assert not problems, "run `python scripts/build_zh.py`:\n" + "\n".join(problems)


@pytest.mark.parametrize("path", sorted(build_zh.OUT.glob("*.ipynb")), ids=lambda p: p.stem)
def test_a_zh_tw_notebook_has_the_english_code_and_cell_ids(path):
    english = json.loads((build_zh.NOTEBOOKS / path.name).read_text())
    twin = json.loads(path.read_text())
    en_cells, zh_cells = english["cells"], twin["cells"]
    assert [c["id"] for c in zh_cells] == [c["id"] for c in en_cells] + [build_zh.CHECK_CELL_ID]
    for en, zh_cell in zip(en_cells, zh_cells):
        en_src, zh_src = "".join(en["source"]), "".join(zh_cell["source"])
        assert zh_cell["cell_type"] == en["cell_type"]
        if en["cell_type"] == "code":  # the same code; the setup cell only gains the language switch
            switched = en_src.rstrip("\n") + build_zh.SWITCH
            assert zh_src == en_src or zh_src == switched, f"{path.name} {en['id']}"
        else:
            assert zh_src != en_src, f"{path.name} {en['id']} is not translated"
    code = ["".join(c["source"]) for c in zh_cells if c["cell_type"] == "code"]
    assert sum('paged_lab.viz.i18n.use("zh-TW")' in src for src in code) == 1
    first = "".join(zh_cells[0]["source"])
    assert build_zh.zh_badges(path.name) in first and f"](../{path.name})" in first  # badges + English link


def test_zh_tw_badges_and_links_point_at_the_zh_tw_files():
    line = build_zh.zh_badges("03_block_tables.ipynb")
    assert "labpath=notebooks%2Fzh-TW%2F03_block_tables.ipynb" in line
    assert "/blob/main/notebooks/zh-TW/03_block_tables.ipynb" in line
    text = ("[a](02_contiguous_vs_paged.ipynb) [b](05_continuous_batching.ipynb) [c](../docs/glossary.md) "
            "[d](https://x.org/a)")
    got = build_zh.localize_markdown(text, {"02_contiguous_vs_paged.ipynb"})
    assert got == ("[a](02_contiguous_vs_paged.ipynb) [b](../05_continuous_batching.ipynb) "
                   "[c](../../docs/glossary.md) [d](https://x.org/a)")


def _copy_project(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    shutil.copytree(ROOT / "scripts", root / "scripts")
    shutil.copytree(ROOT / "notebooks", root / "notebooks",
                    ignore=shutil.ignore_patterns(".ipynb_checkpoints", "exercises"))
    return root


def _run(root: Path, *args: str) -> subprocess.CompletedProcess:
    env_path = str(ROOT)  # the package under test; the copy holds only notebooks and scripts
    return subprocess.run([sys.executable, str(root / "scripts" / "build_zh.py"), *args], capture_output=True,
                          text=True, timeout=120, env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"})


def _edit_cell(path: Path, cell_id: str, change) -> None:
    nb = json.loads(path.read_text())
    cell = next(c for c in nb["cells"] if c["id"] == cell_id)
    cell["source"] = change("".join(cell["source"])).splitlines(keepends=True)
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")


def test_the_staleness_check_names_a_changed_english_cell(tmp_path):
    root = _copy_project(tmp_path)
    translated = [p for p in ENGLISH if build_zh.catalogue_path(p).exists()]
    assert translated, "no catalogue to test with"
    english = root / "notebooks" / translated[-1].name
    cells = json.loads(english.read_text())["cells"][1:]
    cell_id = next(c["id"] for c in cells if c["cell_type"] == "markdown")
    before = _run(root, "--check")
    assert f"cell {cell_id}" not in before.stdout

    _edit_cell(english, cell_id, lambda s: s + "\n\nA sentence the translation has not seen.")
    after = _run(root, "--check")
    assert after.returncode == 1
    assert f"STALE: {english.name} cell {cell_id}" in after.stdout.splitlines()
    listed = _run(root, "--stale")  # what a translator reads: the English text to translate again
    assert "A sentence the translation has not seen." in listed.stdout and f"cell {cell_id}" in listed.stdout


def test_the_index_run_times_are_taken_from_the_english_not_translated():
    # 00's index-paths cell holds measured run times: a new `make budget` changes its numbers only.
    english = "| 01 | [KV](01_kv.ipynb) | ~10 min | 6 s |\n- **All** (01 → 07, about 95 min)"
    zh = "| 01 | [KV](01_kv.ipynb) | 約 10 分鐘 | 6 秒 |\n- **全部**（01 → 07，約 95 分鐘）"
    remeasured = english.replace("6 s", "83 s")
    sha = build_zh.words_sha("00_index.ipynb", "index-paths", english)
    assert build_zh.words_sha("00_index.ipynb", "index-paths", remeasured) == sha  # not stale
    assert build_zh.words_sha("00_index.ipynb", "index-paths", remeasured.replace("All", "Every")) != sha
    # other cells: every digit counts
    assert build_zh.words_sha("01_kv.ipynb", "index-paths", remeasured) != build_zh.en_sha(english)
    assert build_zh.with_english_numbers(zh, remeasured, "00") == zh.replace("6 秒", "83 秒")
    with pytest.raises(ValueError, match="3 numbers, the English 5"):
        build_zh.with_english_numbers("| 01 | 約 10 分鐘 | 6 秒 |", english.split("\n")[0] + " 1", "00")


def test_a_changed_code_cell_makes_the_committed_twin_out_of_date(tmp_path):
    root = _copy_project(tmp_path)
    name = next(p.name for p in ENGLISH
                if build_zh.catalogue_path(p).exists() and not p.name.startswith("00_"))
    english = root / "notebooks" / name
    cell_id = next(c["id"] for c in json.loads(english.read_text())["cells"] if c["cell_type"] == "code")
    _edit_cell(english, cell_id, lambda s: s + "\nprint('one more line')")
    out = _run(root, "--check")
    assert out.returncode == 1 and f"OUT OF DATE: notebooks/zh-TW/{name}" in out.stdout
    assert _run(root).returncode == 0  # regenerating fixes it: the code comes from the English notebook
    twin = json.loads((root / "notebooks" / "zh-TW" / name).read_text())
    assert "print('one more line')" in "".join(next(c for c in twin["cells"] if c["id"] == cell_id)["source"])


def test_nbval_collects_the_zh_tw_edition_but_not_the_exercises(tmp_path):
    root = tmp_path / "repo"
    (root / "notebooks" / "zh-TW").mkdir(parents=True)
    (root / "notebooks" / "exercises").mkdir()
    shutil.copy(ROOT / "notebooks" / "conftest.py", root / "notebooks" / "conftest.py")
    tiny = {"cells": [{"cell_type": "code", "execution_count": None, "id": "c0", "metadata": {},
                       "outputs": [], "source": ["1 + 1"]}],
            "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    for rel in ("01_a.ipynb", "zh-TW/01_a.ipynb", "exercises/01_a_exercises.ipynb"):
        (root / "notebooks" / rel).write_text(json.dumps(tiny))
    res = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "--nbval-lax",
                          "-p", "no:cacheprovider", "notebooks"],
                         cwd=root, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "notebooks/01_a.ipynb" in res.stdout and "notebooks/zh-TW/01_a.ipynb" in res.stdout
    assert "exercises" not in res.stdout


# ---------------------------------------------------------------- the package's words


def test_every_quiz_text_of_the_series_has_a_translation():
    missing = build_zh.untranslated_strings()
    listed = "\n".join(f"{name}: {text}" for name, text in missing)
    where = "add to paged_lab/viz/locale/zh-TW.json (python scripts/build_zh.py --strings)"
    assert not missing, f"{where}:\n{listed}"


def test_quiz_strings_are_read_from_the_cells_as_templates():
    nb = {"cells": [{"cell_type": "code", "source": [
        'quiz = Quiz([Question(f"Why {n} of {m}?", [f"{n} blocks", "Because the pool is full"], answer=1,\n',
        '                      explanation="The pool " + f"has {m} blocks.")])']}]}
    # every text with a word in it, even a short choice ("{} blocks" is shown as "{0} 個 block")
    assert build_zh.quiz_strings(nb) == ["Why {} of {}?", "{} blocks", "Because the pool is full",
                                         "The pool has {} blocks."]


def test_every_glossary_term_is_translated_from_its_current_meaning():
    entries = i18n.catalogue("zh-TW")["glossary"]
    problems = [t.name for t in glossary.TERMS
                if t.name not in entries or entries[t.name].get("en") != t.meaning]
    assert not problems, f"translate (again) the meaning of {problems} in paged_lab/viz/locale/zh-TW.json"
    assert not set(entries) - {t.name for t in glossary.TERMS}, "translations of terms the glossary dropped"


def test_catalogue_templates_place_every_part_they_match():
    for key, value in i18n.catalogue("zh-TW")["strings"].items():
        n = key.count("{}")
        used = {int(i) for i in __import__("re").findall(r"\{(\d+)\}", value)}
        assert used <= set(range(n)), f"{key!r} -> {value!r} places a part it does not match"


def test_t_looks_up_templates_and_falls_back_to_english(zh):
    assert i18n.lang() == "zh-TW"
    assert i18n.t("Every locker is reserved: 5 × 12 = 60") == "每一格都被預留了：5 × 12 = 60"
    assert i18n.t("fits 14 seqs") == "放得下 14 條"
    # a matched part is itself translated: "none of these GPUs" inside the readout
    readout = i18n.t("<b>x</b>, fp8: 1 B/token x 2 x 3 tokens = <b>0.00 GB</b> of KV; "
                     "fits beside the weights on: none of these GPUs")
    assert readout.endswith("這些 GPU 都放不下") and "<b>x</b>" in readout
    assert i18n.t("A sentence nobody translated") == "A sentence nobody translated"
    assert i18n.missing() == ["A sentence nobody translated"]
    with pytest.raises(AssertionError, match="A sentence nobody translated"):
        i18n.assert_translated()
    assert i18n.t("llama-3.1-8b") == "llama-3.1-8b" and i18n.missing() == ["A sentence nobody translated"]


def test_english_is_the_default_and_use_checks_the_language():
    assert i18n.lang() == "en" and i18n.t("fits 14 seqs") == "fits 14 seqs"
    with pytest.raises(ValueError, match="language must be one of"):
        i18n.use("zh-CN")


def test_a_figure_is_translated_when_shown_and_its_data_kept(zh):
    from paged_lab.viz import fig_kv_vs_gpu

    fig = fig_kv_vs_gpu("llama-3.1-8b", "bfloat16", 4096, 32)
    shown = i18n.figure(fig)
    assert shown.layout.title.text == "llama-3.1-8b（bfloat16）：32 × 4,096 個 token 需要 17.2 GB 的 KV"
    assert [tr.name for tr in shown.data][:4] == ["權重", "放不下的權重", "這些請求的 KV", "放不下的 KV"]
    assert [list(tr.y) for tr in shown.data] == [list(tr.y) for tr in fig.data]  # the numbers are untouched
    assert fig.layout.title.text.startswith("llama-3.1-8b (bfloat16): 17.2 GB")  # the original stays English
    assert not i18n.missing()


def test_fig_show_goes_through_the_translation(zh, monkeypatch):

    shown = []
    monkeypatch.setitem(i18n._original, "show", lambda fig, *a, **k: shown.append(fig))
    go.Figure(layout_title_text="KV usage %").show()
    assert shown[0].layout.title.text == "KV 使用率 %"


def test_a_quiz_renders_in_chinese_and_stays_english_inside(zh):
    q = Question("Why does the KV cache grow with the context length while the weights do not?",
                 [Choice("Every token keeps its own K and V; the weights are one shared copy",
                         "32 KiB per token × 4,096 tokens = 128 MiB for one Llama-3.2-1B request of 4,096 "
                         "tokens, and every request has its own; the weights are loaded once and read by all "
                         "of them."),
                  Choice("Longer contexts load extra layers",
                         "The number of layers is fixed by the model (16 for Llama-3.2-1B); a longer context "
                         "runs the same layers over more tokens.")],
                 answer=0, design="V1")
    n = NumberQuestion("How many empty slots does a 9-token sequence leave in its blocks with "
                       "block_size = 16?",
                       answer=7, source=plan_capacity,
                       explanation="⌈9 / 16⌉ = 1 block of 16 holds the 9 tokens and leaves 7 slots empty; "
                                   "blocks of 4 would take ⌈9 / 4⌉ and leave 3. A sequence wastes less than "
                                   "one block, so the waste grows with the block size.",
                       too_low="One block of 16 holds all 9 tokens: how many of its 16 slots are left over?",
                       too_high="A sequence takes only ⌈n / block_size⌉ blocks, and only its last block can "
                                "have empty slots: at most block_size − 1 of them.",
                       mistakes={3: "That is with blocks of 4. With 16, a single block holds all 9 tokens."})
    quiz = Quiz([q, n])
    text = quiz._repr_mimebundle_()["text/html"]
    assert "為什麼 KV Cache 會隨上下文長度成長" in text and "小測驗" in text and "現在的 vLLM" in text
    assert "答案" in text and "其他選項" in text and "請以數字作答" in text and "Why does" not in text
    assert "權重則是大家共用的一份。</b>" in text  # the answer's full stop is Chinese too
    shown = quiz.shown()
    right, wrong = shown[0].pick(0), shown[0].pick(1)
    assert (right.correct and right.text.startswith("✓ 答對了：每個 token 都留著自己的 K 和 V")
            and "所有請求一起讀" in right.text)
    assert not wrong.correct and wrong.text == ("✗ 不太對：（b）層數由模型決定（Llama-3.2-1B 是 16 "
                                                "層）；上下文變長，只是同樣的層處理更多 "
                                                "token。再試試別的選項。")
    assert shown[1].check("3").text == ("✗ 太小了：3 比答案小。這是 4 格 block 的情形。16 格時，一個 block "
                                        "就裝下全部 9 個 token。再試一次。")
    assert shown[1].check("20").text.startswith("✗ 太大了：20 比答案大。一個 sequence 只占")
    assert shown[1].check("七").text.startswith("✗ 不是數字：「七」不是數字") and shown[1].check("７").correct
    assert quiz[0].answer_text.startswith("Every token keeps")  # the notebook's checks read the English
    assert quiz[1].check("3").text.startswith("✗ Too low")      # and the quiz itself stays English
    assert not i18n.missing()


def test_the_quiz_feedback_sentences_are_translated():
    """What a pick or a typed number is told is translated when it is shown, not when the quiz is
    rendered, so the zh-TW notebooks' last cell cannot see a missing one: this test does."""
    from paged_lab.classroom import quiz as Q

    strings = i18n.catalogue("zh-TW")["strings"]
    phrases = [Q.RIGHT, Q.WRONG, Q.TOO_LOW, Q.TOO_HIGH, Q.NOT_A_NUMBER, Q.TRY_ANOTHER, Q.LESS_THAN,
               Q.MORE_THAN, Q.NOT_NUMBER, Q.EMPTY_BOX, "Answer with a number.", "The other choices:",
               "a number", "Check", ". "]
    assert not [p for p in phrases if p not in strings]


def test_a_glossary_table_shows_the_chinese_story_words(zh):
    """A Chinese reader reads the story's Chinese words; the English ones (issue 37: 「故事（英文）」) are
    the English edition's."""
    html = glossary.table(["block table", "slot"])._repr_html_()
    assert "阿頁的對照表" in html and "Ah-Ye's lookup table" not in html and "故事（英文）" not in html
    assert "每個請求一張" in html and "正式名稱" in html and "故事裡原本的說法" in html
    assert "Per request, logical block" not in html


def test_importing_i18n_loads_neither_torch_nor_plotly():
    code = "import sys, paged_lab.viz.i18n; print(sorted(m for m in ('torch', 'plotly') if m in sys.modules))"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip() == "[]"


def _imported(path: Path) -> set[str]:
    """The modules a source file imports (module level and inside functions)."""
    import ast

    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
    return found


def test_the_translation_knows_none_of_its_users_and_viz_none_of_the_classroom():
    package = ROOT / "paged_lab"
    assert not [m for m in _imported(package / "viz" / "i18n.py") if m.split(".")[0] == "paged_lab"]
    for path in sorted((package / "viz").glob("*.py")):
        used = [m for m in _imported(path) if m.startswith("paged_lab.classroom")]
        assert not used, f"{path.name} imports {used}: viz draws for the classroom, never from it"


def test_templates_split_where_the_catalogue_can_translate(zh):
    # a bracketed part is one part, though it holds the template's ", "
    assert (i18n.t("Round 1: luggage A-F = (10, 6, 12, 8, 11, 7), 54 in all")
            == "第 1 輪：A–F 的行李 = (10, 6, 12, 8, 11, 7)，共 54 件")
    # clauses joined by "; " are translated one by one, and a "→" inside a clause does not split the readout
    readout = ("step 3 ran 0 prefill + 3 decode; a full last block → a new block for 2 → 3 running, "
               "3 waiting, 15% of the slots hold tokens")
    assert i18n.t(readout) == ("第 3 步執行了 0 個 prefill + 3 個 decode；最後一個 block 滿了 → 替 2 開新的 "
                               "block → 3 個執行中、3 個在等，15% 的槽位放了 token")
    # a title wrapped for display (viz.widgets.wrap_title) is found with its wrap undone
    assert (i18n.t("External fragmentation: free lockers that add<br>up, but not in a row")
            == "外部碎片：空櫃子加起來夠多，卻不連號")
    assert not i18n.missing()


def test_the_graders_feedback_is_shown_in_chinese_and_kept_in_english(zh):
    """Every line a learner reads from check() (the verdict, expected/yours, the hint, the stub's message,
    the solution's heading) is translated when shown; the call and the package's code stay as they are."""
    import re

    from paged_lab.classroom.exercises import grader as X

    def stub(*args):
        raise NotImplementedError(X.stub_message(name))

    def own(*args):
        raise NotImplementedError("not today")

    for name, ex in X.EXERCISES.items():
        stub.__name__ = own.__name__ = name
        wrong = X._failure(ex, ex.cases[0], "returned 0")
        for text in (X.check(stub, name).text, X.check(own, name).text, wrong,
                     f"{X.PASS} {name}: right on 3 fixed cases and 25 generated ones; "
                     "it answers as the package does.",
                     f"{X.PASS} {name}: right on 1 fixed case and 1 generated one; "
                     "it answers as the package does."):
            shown = X._shown(text)
            for line in shown.split("\n"):
                if line.strip() and not line.strip().startswith(f"{name}("):  # the call: code, as typed
                    assert re.search(r"[\u4e00-\u9fff]", line) and not i18n.needs_translation(line), \
                        f"{name}: untranslated feedback line {line!r}"
        result = X.Result(name, False, wrong, X.solution(name))
        html = result._repr_html_()
        assert "提示：" in html and "<summary>解答</summary>" in html and "解答：套件自己的程式碼" in html
        assert result.text == wrong and "Hint: " in result.text  # the object itself stays English,
        assert "提示：" in str(result) and "Hint: " not in str(result)  # print(result) is in Chinese


def test_the_graders_time_limit_and_type_lines_are_shown_in_chinese(zh):
    """The lines check() adds for a function stopped at its time limit and for an answer of the wrong type."""
    import re

    from paged_lab.classroom.exercises import grader as X

    ex = X.EXERCISES["admit"]
    texts = [X._timed_out(ex, ex.cases[0], 10.0, generated=g) for g in (False, True)]
    for got in ("0", ["0"]):  # the answer itself of the wrong type, then an item of it
        texts.append(X._failure(ex, ex.cases[0], X._compare(ex, [0], got)))
    for text in texts:
        for line in X._shown(text).split("\n"):
            if line.strip() and not line.strip().startswith("admit("):  # the call: code, as typed
                assert re.search(r"[\u4e00-\u9fff]", line) and not i18n.needs_translation(line), \
                    f"untranslated feedback line {line!r}"


# ---------------------------------------------------------------- one rendering per term

CATALOGUES = sorted(build_zh.CATALOGUE.glob("*.json"))  # every notebook translation present, 08 included


@pytest.mark.parametrize("path", CATALOGUES, ids=[p.stem for p in CATALOGUES])
def test_every_notebook_translation_keeps_the_term_table(path):
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    problems = [f"cell {cell_id}: {p}" for cell_id, entry in cells.items()
                for p in i18n.term_problems(entry["zh"])]
    where = "paged_lab/viz/locale/zh-TW.json's \"terms\" and \"plurals\" (python scripts/build_zh.py --check)"
    assert not problems, f"{path.name} breaks {where}:\n" + "\n".join(problems)


def test_every_package_string_and_glossary_entry_keeps_the_term_table():
    data = i18n.catalogue("zh-TW")
    problems = [f"{key!r}: {p}" for key, value in data["strings"].items() for p in i18n.term_problems(value)]
    problems += [f"glossary {name!r}: {p}" for name, entry in data["glossary"].items()
                 for p in i18n.term_problems(entry["meaning"])]
    problems += [f"glossary {t.name!r} story word: {p}" for t in glossary.TERMS
                 for p in i18n.term_problems(t.story_zh)]
    assert not problems, "\n".join(problems)


def test_the_term_table_is_well_formed():
    terms = i18n.catalogue("zh-TW")["terms"]
    for en, entry in terms.items():
        assert entry.get("zh") and isinstance(entry.get("avoid"), list), en
        assert entry["zh"] not in entry["avoid"], f"{en}: its rendering is also a variant it avoids"
        if "gloss" in entry:
            assert entry["zh"] in entry["gloss"], f"{en}: the gloss holds the rendering"
    # the conventions the seeds give (and notebook 08 follows)
    assert terms["block"]["gloss"] == "一格「頁」（block）"
    assert terms["block table"]["gloss"].startswith("阿頁的對照表")
    assert terms["KV Cache"]["zh"] == "KV Cache" and terms["preemption"]["zh"] == "搶占"


@pytest.mark.parametrize("text, found", [
    ("固定批次 batching 的時間軸", "'固定批次' followed by its English head word 'batching'"),
    ("動態批次batching", "'動態批次' followed by its English head word 'batching'"),
    ("三個樣本只花 5 個 blocks。", "'blocks': an English plural in a Chinese sentence (say 'block')"),
    ("每個 sequence 的 queries 都", "'queries': an English plural in a Chinese sentence (say 'query')"),
    ("一個 block（區塊）", "'區塊': the term table writes 'block'"),
    ("請求被 preempt 了", "'被 preempt': the term table writes 'preemption' as '搶占'"),
    ("這時排程器會 **preempt** 它", "'preempt': the term table writes 'preemption'"),
    ("這時 scheduler 會", "'scheduler': the term table writes 'scheduler' as '排程器'"),
    ("行李（KV cache）", "'KV cache': the term table writes 'KV Cache'"),
    ("載入的位元組少了 {2} 倍。", "the term table writes 'N times smaller'"),
    # the seams a native editor found (issue 37 §4): one planted each
    ("在 static 那次執行中，窗口 2 空著", "'static ': the term table writes 'static batching'"),
    ("動態批次每個 **step** 都補人", "the term table writes 'step' as '步驟'"),
    ("小 block 共用得多，但 table 會變長", "'table ': the term table writes 'table' as '表'"),
    ("最後一個 block 的空 slot 數", "'空 slot': the term table writes 'slot' as '槽位'"),
    ("full 層的命中需要每一個 block", "'full 層': the term table writes 'full attention'"),
    ("SmolLM2 的 3 個 query heads 一組", "'heads': an English plural in a Chinese sentence (say 'head')"),
    ("把日誌重播到某一步", "'日誌': the term table writes 'event log' as '事件紀錄'"),
    ("四個帶著 system prompt 的請求", "'system prompt': the term table writes 'system prompt'"),
    ("這條雜湊鏈正是用來確保這一點", "'雜湊鏈': the term table writes 'hash chain' as 'hash 鏈'"),
    ("各層群組快取的 block 不同", "'層群組': the term table writes 'KV cache group' as '層組'"),
    ("每個 query head 仍然關注前面的每一個 token", "'關注': the term table writes 'attend'"),
    ("第一個放得下的（最先適配）", "'最先適配': the term table writes 'first fit'"),
    ("放得下的 token 數再翻一番", "'翻一番': the term table writes 'doubles'"),
    ("實測，context 4,096 個 token", "'context': the term table writes 'context' as '上下文'"),
    ("權重都占一樣多的 bytes。", "'bytes': the term table writes 'byte' as '位元組'"),
    ("故事沿用種子原文的用詞", "'種子': the project's name for the story"),
    ("也就是前一篇文章開頭的問題", "'前一篇文章': the project's name for the story"),
    ("這是原作故事的說法", "'原作故事': the project's name for the story"),
    ("原作故事裡一格就是一頁（block_size 為 1）", "the term table writes 'the seeds' as '故事'"),
    ("所以一個名字代表的是這個\n區塊的所有 token", "a line break inside a Chinese sentence"),
    ("她一次發一排四格（一*頁*）", "'*頁*': Chinese in italics"),
    ('差別："fork" 有 copy-on-write', """'"fork"': half-width quotes in a Chinese sentence"""),
    ("「阿頁說「不必連號」」", "「」 nested inside 「」"),
    ("3 個固定案例和25 個隨機輸入", "'和2': a number touching a Chinese character"),
])
def test_the_term_check_reports_each_kind_of_seam(text, found):
    assert any(found in p for p in i18n.term_problems(text)), i18n.term_problems(text)


@pytest.mark.parametrize("text", [
    "`blocks` 與 `Scheduler._preempt_request`（程式碼）",
    "[kernels/reference.py](../paged_lab/kernels/reference.py) 與 docs/notebooks.md",
    "論文 *Efficient Memory Management for Large Language Model Serving* 的 blocks 一詞",  # a title: 4 words
    "排程器會**搶占**（preemption）最晚進來的請求",
    "形狀是 [batch, KV heads, tokens, head_dim]",
    "All English: five blocks and a scheduler",  # not a Chinese sentence
    "隨機種子（決定哪些請求）",  # a random seed is no story
    "All English, \"quoted\" and *in italics*\n\n但下一段是中文",  # quotes and italics on an English line
    "第一行結束了。\n- 清單的下一項",  # a list item on its own line, a sentence that ended
    "`LLM(..., parallel_sampling=\"fork\")` 與 **粗體**",  # quotes in code, bold
    "`context_lens` 與 `bytes`，每個 token 的位元組數（bytes per token）",  # code and a gloss
])
def test_the_term_check_leaves_code_titles_and_glosses_alone(text):
    problems = i18n.term_problems(text)
    if "Efficient" in text:  # the title is left alone, the plural after it is not
        assert problems == ["'blocks': an English plural in a Chinese sentence (say 'block')"]
    else:
        assert problems == []


def test_the_check_names_a_planted_seam_in_a_copied_catalogue(tmp_path):
    root = _copy_project(tmp_path)
    assert _run(root, "--check").returncode == 0
    path = root / "notebooks" / "i18n" / "zh-TW" / "05_continuous_batching.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    cell_id = next(iter(data["cells"]))
    data["cells"][cell_id]["zh"] += "\n\n固定批次 batching 與 5 個 blocks。"
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    out = _run(root, "--check")
    assert out.returncode == 1
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith(f"TERM: {path.name} cell {cell_id}")]
    assert len(lines) == 2 and "固定批次 batching" in lines[0] and "'blocks'" in lines[1], out.stdout


def test_a_seam_the_parts_of_a_template_make_fails_assert_translated(zh):
    """A template's parts are translated one by one: "{} batching" with "static" → "固定批次" would show
    "固定批次 batching". ``t`` checks what it composes, so the notebook's last cell fails on it."""
    strings = i18n.catalogue("zh-TW")["strings"]
    key = "{} batching (planted)"
    strings[key] = "{0} batching（示範）"
    i18n._templates.cache_clear()
    try:
        assert i18n.t("static batching (planted)") == "固定批次 batching（示範）"
        assert len(i18n.missing()) == 1 and "a seam" in i18n.missing()[0]
        with pytest.raises(AssertionError, match="固定批次 batching"):
            i18n.assert_translated()
    finally:
        del strings[key]
        i18n._templates.cache_clear()


def test_the_preemption_timeline_and_the_playground_legend_read_without_a_seam(zh):
    for text in ("static batching, recompute: 12 steps, 3 preemptions", "continuous batching: 9 steps",
                 "static batching", "continuous batching"):
        shown = i18n.t(text)
        assert "batching" not in shown and not i18n.term_problems(shown), shown
    assert not i18n.missing()


def test_no_learner_reads_the_translators_term_table_or_the_word_seed():
    """The term table's 「不寫成」 column lists the words to avoid: the translators' (``--terms``), never a
    learner's. Nor does a learner read 種子 (the project's word for the story) in any notebook or the
    README."""
    table = build_zh.term_table()
    assert "不寫成" in table and all(f"| {en} |" in table for en in i18n.catalogue("zh-TW")["terms"])
    for path in sorted(build_zh.OUT.glob("*.ipynb")):
        nb = json.loads(path.read_text(encoding="utf-8"))
        text = "".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
        assert "不寫成" not in text and "種子" not in text, path.name
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    zh_section = readme.split("## 繁體中文版")[1].split("\n## ")[0]
    assert "種子" not in readme and not i18n.typesetting_problems(zh_section)
    out = _run(ROOT, "--terms")
    assert out.returncode == 0 and out.stdout.strip() == table


@pytest.mark.parametrize("path", CATALOGUES, ids=[p.stem for p in CATALOGUES])
def test_every_notebook_translation_glosses_each_term_once(path):
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    problems = i18n.gloss_problems([entry["zh"] for entry in cells.values()])
    assert not problems, f"{path.name}:\n" + "\n".join(problems)


def test_the_gloss_check_reports_a_second_gloss_and_a_stacked_sentence():
    first = "排程器會搶占（preemption）一個請求。"
    assert i18n.gloss_problems([first, "之後再說搶占。"]) == []
    again = i18n.gloss_problems([first, "## 3. 記憶體不夠時：搶占（preemption）"])
    assert again == ["'preemption' is glossed 2 times: once, at its first use, then bare"]
    stacked = i18n.gloss_problems(["排程器（scheduler）怎麼搶占（preemption）別的請求"])
    assert len(stacked) == 1 and "glosses preemption, scheduler in one sentence" in stacked[0]
    assert i18n.gloss_problems(["`搶占（preemption）` 與 `搶占（preemption）`"]) == []  # code is not prose


def test_the_graders_pass_line_and_the_weights_readout_are_set_right(zh):
    """Issue 37 §4: 「3 個固定案例和25 個」 (the parts touched the template's 和) and 「8.03 B 個參數」."""
    line = i18n.t("✓ admit: right on 3 fixed cases and 25 generated ones; it answers as the package does.")
    assert line == "✓ admit：3 個固定案例和 25 個自動生成的輸入全部答對；它的答案和套件一致。"
    assert not i18n.term_problems(line) and not i18n.missing()
    weights = i18n.t("Its 8.03 B parameters need 16.1 GB in bf16, more than the 8 GB card: the KV budget is "
                     "zero before a single token. Serving it takes more GPUs or smaller (quantized) weights.")
    assert "8.03 × 10⁹ 個參數" in weights and " B 個參數" not in weights
