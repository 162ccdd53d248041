"""paged_lab.viz.spec_decode: the step figure's four rows say what each slot holds, the playground's
axes hold still, and the readout's numbers are the replay's."""

import pytest

from paged_lab.engine.spec_decode.speedup import ReplayStep, expected_tokens_per_step
from paged_lab.viz.spec_decode import (
    KINDS,
    SpecStepView,
    _stage_kinds,
    fig_expected_tokens,
    fig_sampled_shares,
    fig_spec_replay,
    fig_spec_step,
    replay_totals,
    spec_replay_readout,
    spec_steps,
    step_view,
)

# 13 tokens computed, the 14th pending, 3 drafts in blocks of 4: positions 13 (last), 14-16 (drafts)
VIEW = SpecStepView(block_size=4, block_table=(7, 1, 3, 5, 2), num_computed_tokens=13,
                    num_drafts=3, num_accepted=2, target_token_id=99)


def test_each_row_says_what_each_slot_holds():
    draft, verify, accept, rollback = _stage_kinds(VIEW)
    assert draft[:13] == ["verified"] * 13 and draft[13:17] == ["last slot"] + ["draft slot"] * 3
    assert verify[13:17] == ["last", "draft", "draft", "draft"]
    assert accept[13:17] == ["verified", "accepted", "accepted", "rejected"]
    assert rollback[:16] == ["verified"] * 16 and rollback[16] == "stale"
    assert all(row[17:] == ["empty"] * 3 for row in (draft, verify, accept, rollback))
    assert VIEW.num_computed_after == 16
    assert VIEW.blocks_of_rejected_only == [2]       # block 2 holds only the rejected draft: vLLM keeps it


def test_the_step_figure_draws_every_slot_of_the_drawn_blocks_in_each_row():
    fig = fig_spec_step(VIEW, max_blocks=2)          # blocks 5 and 2: 8 slots in each of 4 rows
    assert sum(len(t.x) for t in fig.data) == 4 * 8
    assert {t.name for t in fig.data} == {name for _, name in KINDS.values()}
    ticks = fig.layout.yaxis.ticktext
    assert ticks[-1].startswith("1 · draft 3") and "accept 2 of 3; the target picks 99" in ticks[1]
    assert ticks[0] == "4 · roll back: num_computed_tokens = 16; block 2 stays"
    assert [a.text for a in fig.layout.annotations] == ["block 5", "block 2", "(+3 earlier)"]
    whole = fig_spec_step(VIEW)
    assert sum(len(t.x) for t in whole.data) == 4 * 4 * 4  # the last 4 blocks by default


def test_a_view_that_cannot_be_refuses_with_the_limit():
    with pytest.raises(ValueError, match=r"num_accepted must be in \[0, 3\]"):
        SpecStepView(4, (7, 1, 3, 5, 2), 13, 3, 4, 99)
    with pytest.raises(ValueError, match="block_table holds 16 slots, fewer than"):
        SpecStepView(4, (7, 1, 3, 5), 13, 3, 2, 99)


REPLAYS = {"repetitive": {1: [ReplayStep(0, 0, 1), ReplayStep(1, 1, 2), ReplayStep(1, 0, 1)],
                          2: [ReplayStep(0, 0, 1), ReplayStep(2, 2, 3)]},
           "random text": {1: [ReplayStep(0, 0, 1)] + [ReplayStep(1, 0, 1)] * 3,
                           2: [ReplayStep(0, 0, 1)] + [ReplayStep(0, 0, 1)] * 3}}


def test_the_playground_holds_its_axes_and_its_readout_counts_the_replay():
    figs = [fig_spec_replay(k, kind, REPLAYS) for kind in REPLAYS for k in (1, 2)]
    assert len({tuple(f.layout.xaxis.range) for f in figs}) == 1 and figs[0].layout.xaxis.range == (0.5, 4.5)
    assert len({tuple(f.layout.yaxis.range) for f in figs}) == 1
    rep = figs[0]
    assert [list(t.y) for t in rep.data] == [[1, 1, 1], [0, 1, 0], [0, 0, 1]]
    assert replay_totals(REPLAYS["repetitive"][1]) == {"steps": 3, "tokens": 4, "drafts": 2, "accepted": 1}
    lines = spec_replay_readout(None, 1, "repetitive", REPLAYS)
    assert lines[0] == "2 drafts verified, 1 accepted: acceptance rate 50%"
    assert lines[1] == "3 steps instead of 4: 1.33 tokens per step, 25% fewer steps"
    assert lines[2] == "1 KV slots written for rejected drafts and rolled back"
    with pytest.raises(ValueError, match="no replay for prompt_kind='code', k=1"):
        fig_spec_replay(1, "code", REPLAYS)


def test_the_expected_tokens_figure_draws_the_formula():
    fig = fig_expected_tokens(ks=(1, 3), points=11, marked={"measured": (0.5, 1.8)})
    line = fig.data[1]
    assert line.name == "k = 3" and line.y[5] == expected_tokens_per_step(0.5, 3) and line.y[-1] == 4
    assert fig.data[2].x == (0.5,)
    shares = fig_sampled_shares([0.5, 0.5], {"sampled": [0.49, 0.51]})
    assert [t.name for t in shares.data] == ["target p", "sampled"]
    with pytest.raises(ValueError, match="has 1 entries, the target 2"):
        fig_sampled_shares([0.5, 0.5], {"bad": [1.0]})


def _log():
    """A hand-built log in the engine's format (docs: w40core's events): request A, blocks of 4, a prompt
    of 6 tokens, then one step that drafts 3 and accepts 2; request B around it."""
    from paged_lab.memory import Event

    rows = [("allocate", "A", (7, 1), 6, 1), ("allocate", "B", (2,), 3, 1),
            ("append", "A", (1,), 7, 2),          # the pending token: 7 known
            ("draft", "A", (1, 3), 10, 2),        # positions 7, 8, 9 get slots: block 3 is new
            ("append", "B", (2,), 4, 2),
            ("verify", "A", (1, 3), 10, 2),
            ("accept", "A", (1, 3), 9, 2),        # positions 7 and 8 accepted
            ("rollback", "A", (3,), 9, 2)]        # position 9 rejected: not counted as computed
    return [Event(i, kind, sid, blocks, n, clock=clock)
            for i, (kind, sid, blocks, n, clock) in enumerate(rows)]


def test_the_steps_with_drafts_are_read_from_the_event_log():
    steps = spec_steps(_log(), "A")
    assert steps == [{"clock": 2, "at": 3, "num_tokens": 7, "num_drafts": 3, "num_accepted": 2}]
    assert spec_steps(_log(), "B") == []


def test_the_step_view_of_the_hand_built_log():
    view = step_view(_log(), "A", 2, num_blocks=8, block_size=4, token_ids=list(range(100, 112)))
    assert view.block_table == (7, 1, 3) and view.num_computed_tokens == 6
    assert (view.num_drafts, view.num_accepted, view.target_token_id) == (3, 2, 109)
    with pytest.raises(ValueError, match="verified no drafts at step 1"):
        step_view(_log(), "A", 1, num_blocks=8, block_size=4)


def test_the_engine_s_own_log_and_counts_match_the_views_and_the_replay():
    """On a tiny random model: every step the engine's event log shows is a view whose table holds every
    slot; replaying the run without drafts gives the engine's steps, drafts and accepted drafts."""
    from tiny_models import head_dim_64_llama

    from paged_lab.engine import LLM, SamplingParams
    from paged_lab.engine.spec_decode.ngram import ngram_drafts
    from paged_lab.engine.spec_decode.speedup import replay_greedy

    class Tok:
        eos_token_id = None

        def decode(self, ids, skip_special_tokens=True):
            return " ".join(map(str, ids))

    model = head_dim_64_llama()
    spec = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3, "prompt_lookup_min": 1}
    kw = dict(tokenizer=Tok(), block_size=4, num_kv_blocks=64, attention_backend="torch")
    prompt = {"prompt_token_ids": [5, 6, 7, 8] * 3}
    params = SamplingParams(temperature=0, max_tokens=20, ignore_eos=True)
    plain = LLM(model, **kw).generate([prompt], params, use_tqdm=False)[0]
    llm = LLM(model, speculative_config=spec, **kw)
    out = llm.generate([prompt], params, use_tqdm=False)[0]
    st = llm.stats()
    events = st["events"]
    sid = next(e.seq_id for e in events if e.kind == "draft")
    tokens = list(out.prompt_token_ids) + list(out.outputs[0].token_ids)
    steps = spec_steps(events, sid)
    assert steps and sum(s["num_drafts"] for s in steps) == st["spec_decode_num_draft_tokens"]
    assert sum(s["num_accepted"] for s in steps) == st["spec_decode_num_accepted_tokens"]
    for s in steps:
        view = step_view(events, sid, s["clock"], llm.num_blocks, llm.block_size, tokens)
        assert len(view.block_table) * 4 >= view.num_computed_tokens + 1 + view.num_drafts
    replayed = replay_totals(replay_greedy(prompt["prompt_token_ids"], list(plain.outputs[0].token_ids),
                                           lambda toks, most: ngram_drafts(toks, 1, 3, min(3, most))))
    assert out.outputs[0].token_ids == plain.outputs[0].token_ids
    assert (replayed["steps"], replayed["drafts"], replayed["accepted"]) == (
        st["num_steps"], st["spec_decode_num_draft_tokens"], st["spec_decode_num_accepted_tokens"])
