"""The three pictures of issue 27 §4: the hash chain (04), chunked prefill step by step (05) and the engine
as a whole (07). Each test reads what the figure shows (its data and annotations), not its pixels."""

import dataclasses

import pytest

from paged_lab.memory import BlockManager
from paged_lab.memory.prefix_cache import block_hashes
from paged_lab.sim import Request, simulate
from paged_lab.sim.simulate import Chunk
from paged_lab.viz.chunks import chunked_prefill_story, fig_chunked_steps
from paged_lab.viz.hash_chain import fig_hash_chain, hash_chain
from paged_lab.viz.overview import EngineOverview, engine_overview, fig_engine_overview, overview_boxes


# ------------------------------------------------------------------ the hash chain
def _arrows(fig) -> set[str]:
    return {a.name for a in fig.layout.annotations if " -> " in (a.name or "")}


def test_hash_chain_draws_one_box_per_distinct_hash_and_an_arrow_per_parent():
    shared = list(range(8))
    prompts = {"A": shared + [1, 2, 3, 4], "B": shared + [5, 6, 7, 8, 9]}
    fig = fig_hash_chain(prompts, block_size=4)
    a, b = (block_hashes(p, 4) for p in prompts.values())
    assert a[:2] == b[:2] and a[2] != b[2]
    boxes = list(fig.data[0].customdata)
    assert boxes == [h.hex() for h in a] + [b[2].hex()]  # the shared two once, then each own third block
    short = [h.hex()[:8] for h in a]
    assert _arrows(fig) == {f"{short[0]} -> {short[1]}", f"{short[1]} -> {short[2]}",
                            f"{short[1]} -> {b[2].hex()[:8]}"}  # B forks off after the shared blocks
    assert [a.name for a in fig.layout.annotations if (a.name or "").startswith("partial")] == ["partial B"]


def test_hash_chain_an_extra_key_changes_every_hash_and_shared_boxes_sit_between_their_prompts():
    tokens = list(range(12))
    nodes = hash_chain({"A": tokens, "C": tokens}, 4, extra_keys={"C": "tenant-2"})
    assert len(nodes) == 6 and all(len(n.prompts) == 1 for n in nodes.values())  # nothing shared
    assert [n.parent for n in nodes.values()][:3] == [None, *list(nodes)[:2]]
    same = fig_hash_chain({"A": tokens, "B": tokens}, 4)
    assert len(same.data[0].customdata) == 3
    assert set(same.data[0].y) == {-0.65}  # halfway between the two rows


def test_hash_chain_names_bad_input():
    with pytest.raises(ValueError, match="block_size"):
        hash_chain({"A": [1, 2]}, 0)
    with pytest.raises(ValueError, match="prompts"):
        fig_hash_chain({}, 4)


# ------------------------------------------------------------------ chunked prefill, step by step
def test_chunked_prefill_story_gives_the_document_what_the_decodes_leave_of_the_budget():
    steps = chunked_prefill_story(prompt_len=20, num_chats=2, budget=8, block_size=4)
    doc = [(c.start, c.end) for step in steps for c in step if c.name == "document" and c.is_prefill]
    assert doc == [(0, 6), (6, 12), (12, 18), (18, 20)]
    assert all(sum(c.num_tokens for c in step) <= 8 for step in steps)
    # with a budget of 11 the same two decodes leave 9 a step
    wider = chunked_prefill_story(prompt_len=20, num_chats=2, budget=11, block_size=4)
    assert [(c.start, c.end) for s in wider for c in s if c.name == "document" and c.is_prefill] == [
        (0, 9), (9, 18), (18, 20)]


def test_chunked_steps_figure_shows_each_requests_tokens_and_chunk_labels_per_step():
    steps = chunked_prefill_story(prompt_len=20, num_chats=2, budget=8, block_size=4)
    fig = fig_chunked_steps(steps, budget=8)
    bars = {t.name: t for t in fig.data}
    assert list(bars) == ["chat0", "chat1", "document"]
    assert list(bars["document"].y[:6]) == [0, 6, 6, 6, 2, 1]
    assert list(bars["document"].text[:6]) == ["", "[0:6]", "[6:12]", "[12:18]", "[18:20]", "decode"]
    assert list(bars["chat0"].text[:2]) == ["[0:3]", "decode"]
    totals = [sum(t.y[i] for t in fig.data) for i in range(len(steps))]
    assert totals == [sum(c.num_tokens for c in s) for s in steps] and max(totals) == 8
    assert [s.y0 for s in fig.layout.shapes] == [8]  # the budget line
    with pytest.raises(ValueError, match="steps"):
        fig_chunked_steps([])


def test_simulate_records_each_steps_chunks_with_idle_steps_and_arrivals():
    wl = [Request("a", (1, 2, 3), 2, 0), Request("b", (4, 5), 1, 2)]
    steps = simulate(wl, BlockManager(16, 4), {"max_num_seqs": 2}, record_chunks=True).chunks
    assert steps[0] == [Chunk(0, "a", 0, 3, True)] and steps[1] == [Chunk(1, "a", 3, 4, False)]
    assert steps[2] == [Chunk(2, "b", 0, 2, True)] and len(steps) == 3  # idle steps are recorded too
    assert simulate(wl, BlockManager(16, 4), {"max_num_seqs": 2}).chunks == []  # off by default


# ------------------------------------------------------------------ the engine as a whole
@pytest.fixture(scope="module")
def tiny_llm():
    from test_random_models import TINY

    from paged_lab.engine import LLM
    from paged_lab.models import random_model

    model, tok, _ = random_model(TINY, dtype="float32", device="cpu")
    return model, tok, LLM


def test_overview_reads_the_live_engine_and_says_which_backend_ran(tiny_llm):
    from paged_lab.engine import SamplingParams

    model, tok, LLM = tiny_llm
    llm = LLM(model, tokenizer=tok, block_size=8, num_kv_blocks=24, max_num_seqs=5, max_num_batched_tokens=64,
              attention_backend="torch", enable_prefix_caching=False, device="cpu")
    before = engine_overview(llm)
    assert not before.backend_ran and before.backend == "torch"
    outs = llm.generate(["hello there", "abc"], SamplingParams(temperature=0, max_tokens=2), use_tqdm=False)
    ov = engine_overview(llm, outs)
    assert (ov.num_requests, ov.max_num_seqs, ov.max_num_batched_tokens) == (2, 5, 64)
    assert (ov.num_blocks, ov.block_size, ov.prefix_caching, ov.backend_ran) == (24, 8, False, True)
    assert ov.kv_cache_bytes == llm.kv.bytes and ov.model == llm.model_name
    fig = fig_engine_overview(llm, outs)
    text = {a.name: a.text for a in fig.layout.annotations}
    assert "max_num_seqs = 5" in text["scheduler"] and "token budget 64 per step" in text["scheduler"]
    assert "24 blocks × 8 tokens" in text["kv_cache"] and "prefix caching off" in text["kv_cache"]
    assert text["attention"].startswith("<b>attention backend: torch</b>")
    assert "FlashAttention" in text["attention"]
    assert "2 prompts" in text["requests"] and "CPU" in text["device"]
    assert [n for n in text if " -> " in n and not n.endswith("label")] == [
        "requests -> scheduler", "scheduler -> kv_cache", "kv_cache -> attention", "attention -> device"]
    # each part is drawn as a filled box (a trace), under its text: the page draws data, not only shapes
    from paged_lab.viz.overview import LAYOUT

    boxes = [(min(t.x), max(t.x), min(t.y), max(t.y)) for t in fig.data]
    assert [t.fill for t in fig.data] == ["toself"] * 5 and boxes == [LAYOUT[n] for n in overview_boxes(ov)]


def test_overview_boxes_follow_the_settings():
    ov = EngineOverview(model="m", num_layers=3, num_kv_heads=8, head_dim=64, dtype="bfloat16",
                        num_requests=None, max_num_seqs=7,
                        max_num_batched_tokens=None, preemption="recompute", num_blocks=1000, block_size=16,
                        prefix_caching=True, kv_cache_bytes=3 * 2**20, backend="triton", backend_ran=False,
                        device="CUDA GPU 0 (sm_90)")
    boxes = overview_boxes(ov)
    assert boxes["scheduler"][1] == "max_num_seqs = 7<br>no token budget<br>preemption by recompute"
    assert boxes["kv_cache"][1] == "1,000 blocks × 16 tokens<br>3.0 MiB (bfloat16)<br>prefix caching on"
    assert boxes["attention"][0] == "attention backend: triton (chosen, not run yet)"
    assert boxes["requests"][1].startswith("prompts,")
    assert boxes["device"][1].endswith("3 layers, 8 KV heads of 64")


def test_overview_names_a_cuda_device_by_its_compute_capability(monkeypatch):
    import torch

    from paged_lab.viz import overview

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device: (9, 0))
    assert overview._device(torch.device("cuda", 1)) == "CUDA GPU 1 (sm_90)"
    assert overview._device(torch.device("cpu")).startswith("CPU, ")


# ------------------------------------------------------------------ every word they show, in zh-TW
def test_the_three_pictures_are_translated(tiny_llm):
    from paged_lab.viz import i18n

    model, tok, LLM = tiny_llm
    llm = LLM(model, tokenizer=tok, block_size=8, num_kv_blocks=16, max_num_batched_tokens=None, device="cpu")
    figs = [fig_engine_overview(llm), fig_chunked_steps(chunked_prefill_story(), budget=8),
            fig_hash_chain({"A": list(range(9)), "B": list(range(9))}, 4, extra_keys={"B": "tenant-2"})]
    ov = engine_overview(llm)
    for backend in ("cpu", "torch", "triton", "reference"):  # every backend's words, run or not
        on_gpu = dataclasses.replace(ov, backend=backend, backend_ran=True, device="CUDA GPU 0 (sm_90)")
        figs.append(fig_engine_overview(on_gpu))
    i18n.use("zh-TW")
    try:
        shown = [i18n.figure(f) for f in figs]
        assert not i18n.missing(), i18n.missing()
        assert "請求" in shown[0].layout.annotations[1].text  # translated, not only not recorded
    finally:
        i18n.use("en")
