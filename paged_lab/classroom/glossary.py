"""One glossary for the series: story word (English and Chinese) → serving name → one line.

The station story (told in notebook 02) has one mapping, kept here and nowhere else:

- a **locker** (一格) is a **page** (頁): one **block**, room for ``block_size`` tokens' K and V. The
  story says it itself: 「一格「頁」（block）可以放固定數量的 token，例如 16 個」, 「一格等於一頁」;
- a **place** in a locker (格裡的一個位置) is a **slot**: room for one token's K and V;
- **Ah-Ye's lookup table** (阿頁的對照表) is the **block table**: a request's pages in reading order,
  each with the locker it actually sits in.

The story draws whole lockers, each exactly full (「行李剛好填滿每一頁」), and so does notebook 02's
first wall: one square, one locker. Where the series needs single tokens (notebook 02 from section 2
on, then 03-07) it draws a locker's ``block_size`` places as a row of small squares. That row is the
series' extension of the story, which never looks inside a locker; a locker is a page throughout.

A notebook shows the words it uses with one call, ``glossary.table(["slot", "block", ...])``;
``docs/glossary.md`` is ``glossary.markdown()`` (``python scripts/build_glossary.py`` writes it, and
a test fails when it is stale, or when a notebook's summary bolds a term that is not here).
``metaphor_problems(text)`` keeps the mapping fixed: it names retired story words (``RETIRED``) and a
locker or page glossed as the wrong serving term; a test runs it over every notebook and the docs.
``Term.seed`` says whether the Chinese word is the story's own; the others are ours, in its style.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass

from paged_lab.viz import i18n
from paged_lab.viz.tables import Table


@dataclass(frozen=True)
class Term:
    name: str  # the serving name, as vLLM / nano-vllm spell it: the key notebooks look up
    story: str  # the story's word, in English
    story_zh: str  # the story's word, in Chinese (Traditional, as the story writes it)
    meaning: str  # one line
    seed: bool = False  # story_zh is the story's own wording
    aliases: tuple[str, ...] = ()  # other spellings a summary may bold (plural, verb form)


TERMS: tuple[Term, ...] = (
    # --- requests and their luggage (notebooks 01-02) ---
    Term("request", "traveller", "旅客", "One conversation being served: a prompt and the tokens generated "
         "for it (vLLM `Request`, nano-vllm `Sequence`).", True, ("requests", "sequence", "sequences")),
    Term("KV cache", "luggage", "行李", "The K and V vectors of every token in every layer, kept so the next "
         "token need not recompute them; grows linearly with the conversation.", True),
    Term("K and V", "name tags and folders", "名牌和資料夾",
         "Per token and layer, the key (matched against later queries) and the value (mixed into the "
         "output).", True, ("K/V", "KV")),
    Term("bytes per token", "the size of one piece of luggage", "一件行李的大小",
         "KV bytes one token costs: 2 × "
         "layers × KV heads × head_dim × bytes per number."),
    Term("GQA", "several queries share one set of name tags and folders", "幾個查詢共用一組名牌和資料夾",
         "Grouped-query attention: a group of query heads shares one KV head, so the cache stores fewer "
         "heads (MHA: one KV head per query head; MQA: one for all).", False,
         ("grouped-query attention", "MQA", "MHA")),
    Term("model weights", "the station's rules, one copy for everyone", "模型權重",
         "The parameters: one copy shared by every request; paging does not shrink them (quantization does).",
         False, ("weights",)),
    Term("KV pool", "the locker area", "置物櫃區", "The GPU memory left for the KV cache after the weights, "
                                               "cut into `num_blocks` blocks shared "
                                               "by all requests.", True, ("KV memory",)),
    # --- lockers, pages and the table (notebooks 02-03) ---
    Term("slot", "a place in a locker", "格裡的一個位置", "Room for one token's K and V; `slot = block id × "
         "block_size + offset`.", False, ("slots", "KV slot")),
    Term("block", "a locker: one page", "一格「頁」", "`block_size` consecutive slots, the "
         "unit of allocation: a request takes a new block only when its last one is full.", True,
         ("blocks", "KV block", "physical block")),
    Term("block_size", "places per locker (16 in the story)", "一格放幾個 token",
         "Tokens per block: 16 in the paper; engines choose "
                                                    "what their attention kernel supports "
                                                    "(nano-vllm: 256).", False, ("block size",)),
    Term("block table", "Ah-Ye's lookup table", "阿頁的對照表", "Per request, logical block j → physical "
                                                          "block id, in reading order; attention reads K "
                                                          "and V through it.", True,
         ("block tables", "block_table", "block_tables")),
    Term("logical block", "a traveller's page number (reading order)", "閱讀順序",
         "The j-th block of a request, counting its tokens in order.", True, ("logical blocks",)),
    Term("physical block id", "where the page actually sits", "實際位置", "A block's index in the KV pool, "
         "wherever it is.", True, ("physical block ids",)),
    Term("slot_mapping", "which place of which locker holds piece k", "第 k 件行李放在哪一格的哪個位置",
         "Per token, the slot its K and V are "
         "stored in: `block_table[pos // block_size] * block_size + pos % block_size`."),
    Term("free queue", "Ah-Ye's list of empty pages", "阿頁的空頁清單",
         "The free blocks, in the order they are "
         "handed out. V1: a freed block with nothing cached goes to the front (reused first), a cached one "
         "to the back, so cached content is overwritten least recently freed first."),
    Term("free", "a traveller leaving", "旅客離開", "A finished request returns its blocks to the free "
                                                "queue, last block first."),
    # --- the old manager's waste (notebook 02) ---
    Term("contiguous reservation", "the old manager's 12 lockers in a row", "先鎖 12 格連號",
         "Reserving `max_seq_len` slots in a row for each request when it arrives (before paging).", True,
         ("max_seq_len reservation", "contiguous reservations")),
    Term("internal fragmentation", "lockers locked but empty", "沒有東西卻被占著",
         "Reserved slots that never hold "
         "a token: the request finished early.", True),
    Term("external fragmentation", "holes that add up but fit nobody", "加起來夠大卻塞不進",
         "Free memory split into holes, each too small for one more reservation.", True),
    Term("PagedAttention", "Ah-Ye's way: hand out pages anywhere, read through the table", "照表讀取分散的頁",
         "Block-by-block KV allocation plus an attention kernel that reads scattered blocks through the "
         "block table (Kwon et al., SOSP 2023).", True, ("paged attention",)),
    # --- windows and rounds (notebook 05) ---
    Term("max_num_seqs", "service windows", "服務窗口", "How many requests run together in one step (batch "
         "slots).", True, ("batch slot", "batch slots", "window", "windows")),
    Term("step", "one round", "一輪", "One forward pass over the running batch: each decoding request gains "
         "one token.", True, ("steps", "scheduler step", "engine step")),
    Term("waiting queue", "the waiting area", "等待區", "Requests not admitted yet, or sent back; served in "
         "order.", True, ("waiting",)),
    Term("admission", "let in only when the luggage fits", "放得下才讓人進",
         "Moving a request from waiting to "
         "running: its whole prompt must fit (prefix-cache hits counted in V1). V0 also allocated all its "
         "blocks then; V1 allocates them as the prompt is computed.", True, ("admitted", "admit")),
    Term("prefill", "reading the whole earlier text in", "整段前文",
         "Computing K and V for a request's prompt "
         "tokens (and, after a recompute, its earlier output).", True, ("prefills",)),
    Term("decode", "one more piece per round", "每輪多一件", "Computing one new token for a running request.",
         False, ("decodes",)),
    Term("chunked prefill", "a long text read in over several rounds", "長前文分幾輪讀完",
         "A long prompt's prefill is split over steps, so prefills and decodes share each step's token "
         "budget (opt-in in V0, on by default in V1)."),
    Term("max_num_batched_tokens", "how many pieces the windows handle per round", "每輪能處理的件數",
         "The token budget per step, shared by decodes and (chunks of) prefills (in V0 and V1; V1 chunks "
         "prefills by default)."),
    Term("static batching", "the whole group finishes before the next", "整組辦完才換",
         "A batch runs until its longest member is done; finished rows sit idle (padding).", True),
    Term("continuous batching", "refill a window every round", "每輪補人",
         "The batch is re-formed every step, "
         "so a finished request's place is refilled at once (Orca's iteration-level scheduling).", True),
    Term("preemption", "sent back to the waiting area", "請回等待區",
         "Freeing a running request's blocks when "
         "the pool runs out; the newest running request goes first. V0: recompute or swap; V1: recompute "
         "only.", False, ("preempted", "preempt", "preempts", "preemptions")),
    Term("recompute", "start the luggage over", "重新放一次行李", "Preemption that drops the KV and later "
                                                           "prefills the prompt and the generated tokens "
                                                           "again (V1's only "
                                                           "kind).", False, ("recomputed", "recomputes")),
    Term("swap", "pages moved out and back in", "換出去再換回來", "V0's other preemption: copy the blocks to "
                                                           "CPU memory and back "
                                                           "instead of "
                                                           "recomputing.", True, ("swapped", "swap space")),
    # --- sharing (notebooks 04, 07) ---
    Term("parallel sampling", "n answers to one question", "同一個問題要 n 個答案",
         "`SamplingParams(n>1)`. V0: fork "
         "the sequence, copy-on-write; V1: n requests sharing the prompt's full blocks through prefix "
         "caching.", False, ("n > 1",)),
    Term("fork", "a traveller's twin using the same pages", "分身共用同一批頁",
         "V0: a new sequence that shares "
         "every block of its parent (each block's refcount + 1), nothing copied.", False,
         ("forks", "forked")),
    Term("refcount", "how many tables list a page", "有幾張對照表記著這一頁",
         "How many sequences hold a block; it "
         "returns to the free queue at 0.", False, ("refcounts",)),
    Term("copy-on-write", "copy a shared page before writing into it", "要寫之前先複製",
         "V0: appending to a shared, partly filled block first copies it (`CowAction(src, dst)`); full "
         "blocks are never copied. V1 has none for n > 1 or one-group models, but copies a shared tail "
         "block on a partial prefix hit in hybrid models.", False,
         ("CowAction", "copy on write", "copies on write")),
    Term("prefix caching", "recognise pages whose contents are already stored", "認出已經放過的頁",
         "Full blocks named by a chained hash are reused by any later request with the same prefix; hits "
         "are counted in tokens.", False, ("prefix cache", "prefix-cache hit", "prefix cache hit")),
    Term("block hash", "the label on a page", "頁的標籤", "`hash(parent hash, token ids, extra_key)` of a "
                                                      "full block: equal only after "
                                                      "an equal prefix.", False, ("block hashes",)),
    Term("system prompt", "the same instructions in front of everyone", "系統提示詞",
         "A shared start of many prompts: what prefix caching stores once.", False, ("system prompts",)),
    Term("eviction", "reusing a freed page for new luggage", "舊頁拿去放新行李",
         "Handing out a free block that "
         "still held cached content; its hash is forgotten.", False, ("evict", "evicted", "evictions")),
    # --- reading the pages (notebook 06) ---
    Term("mask", "skip the empty places", "空位不讀", "Empty slots of a last block are masked on the loads "
         "(read as 0) and on the scores (−∞).", False, ("masked", "masking")),
    Term("online softmax", "a running tally while reading page by page", "邊讀邊記的總分",
         "Softmax in one pass over the blocks: a running max, sum and weighted V, rescaled when the max "
         "grows."),
    Term("split-KV", "the table split among helpers", "把對照表分給幾位幫手",
         "Flash-decoding: partitions of a long "
         "context run in parallel and merge by log-sum-exp.", False, ("flash-decoding", "splits")),
    # --- the whole station (notebook 07) ---
    Term("inference engine", "the locker area's whole management", "置物櫃區的整套管理",
         "Schedules many requests, manages the paged KV cache, runs the model each step: vLLM, or "
         "`paged_lab.engine.LLM` here.", True, ("engine", "LLM", "vLLM")),
    Term("BlockManager", "Ah-Ye, the new manager", "阿頁", "Hands out blocks, keeps the block tables, "
         "refcounts, copy-on-write and the prefix cache (`paged_lab.memory`).", True),
    Term("ContiguousAllocator", "the old manager", "老管理員", "Reserves `max_seq_len` slots in a row per "
         "request (`paged_lab.sched`), for comparison.", True),
    Term("Scheduler", "the clerk who calls the next traveller", "叫號的人", "Each step picks which requests "
         "run: admits, schedules prefills and decodes, preempts (`paged_lab.sched`)."),
    # --- today's models (notebook 08): no story of their own; the words are ours ---
    Term("MLA", "one packed bag instead of name tags and folders", "一個打包好的袋子，取代名牌和資料夾",
         "Multi-head latent attention (DeepSeek-V2/V3): each layer caches one latent of `kv_lora_rank + "
         "qk_rope_head_dim` numbers per token instead of K and V per head; a prefill expands it into every "
         "head's K and V, a decode step attends over the latent itself, as MQA (vLLM `forward_mqa`).",
         False, ("multi-head latent attention", "latent")),
    Term("fp8 KV cache", "luggage packed smaller, a little blurred", "壓得更小、細節略糊的行李",
         "`kv_cache_dtype=\"fp8\"`: K and V stored as 8-bit floats (e4m3) with a scale per layer, 1 byte a "
         "number: half of bf16's bytes, at a small error in the logits.", False,
         ("fp8", "kv_cache_dtype", "fp8 cache")),
    Term("sliding window", "looking back only at the latest luggage", "只回頭看最近的行李",
         "A layer that attends only to the last W tokens (gpt-oss: every other layer, W = 128); the "
         "blocks wholly before them are freed while the request runs (vLLM `SlidingWindowManager`).", False,
         ("sliding-window layer", "sliding-window layers", "sliding window attention")),
    Term("KV cache group", "one table per kind of layer", "每一種層一張表",
         "Layers of one attention kind that share a spec and one block table per request (vLLM "
         "`KVCacheGroupSpec`); a hybrid model has several groups over one pool, one manager each.", False,
         ("KV cache groups", "hybrid block manager", "HybridBlockManager", "layer group")),
    Term("null block", "an empty placeholder in the table", "表裡的空位記號",
         "vLLM's block 0, never handed out: a block table holds it where a block was freed (a "
         "sliding-window layer's old blocks), so later positions stay put; `NULL_BLOCK` in paged_lab.", False,
         ("NULL_BLOCK",)),
    # --- beyond one GPU (notebook 09): the story's halls ---
    Term("tensor parallelism", "one traveller's luggage split over several halls",
         "一位旅客的行李分放在幾個廳",
         "A model split over `tensor_parallel_size` GPUs: each computes its share of the attention heads "
         "and MLP columns and keeps only its heads' K and V; one scheduler and one block table serve them "
         "all (vLLM `ColumnParallelLinear`, `RowParallelLinear`).", False,
         ("TP", "tensor_parallel_size", "tensor-parallel")),
    Term("all-reduce", "the halls adding up their shares", "各廳把自己那份加總起來",
         "A collective that sums a tensor over every rank and gives each the sum: after a row-parallel "
         "projection, it turns N partial results into the full hidden state (twice per layer).", False,
         ("all-reduces", "allreduce")),
    Term("decode context parallelism", "a traveller's luggage split by arrival time", "依到站先後分放行李",
         "vLLM's `decode_context_parallel_size`: the GPUs of a TP group split each request's tokens (a "
         "block covers block_size × dcp tokens), so an MLA latent held whole by every GPU is shared out.",
         False, ("dcp", "decode_context_parallel_size")),
    Term("disaggregated serving", "packing at one station, travelling on from another",
         "一站打包、另一站續行",
         "Prefill on one worker, decode on another: the prompt's KV blocks are sent between them (vLLM's KV "
         "connectors, `NixlConnector`), and the decode side computes only what did not travel.", False,
         ("disaggregated prefill", "prefill/decode disaggregation", "KV handoff")),
    Term("KV offloading", "a second shelf in the back room", "後面房間的第二排架子",
         "vLLM V1's CPU tier (`kv_offloading_size`, GiB): prompt blocks are copied there as they are "
         "computed, and a returning request loads the blocks the GPU pool lost instead of computing them "
         "again; least recently used blocks leave first (vLLM `OffloadingConnector`).", False,
         ("CPU tier", "kv_offloading_size", "offloading connector", "second tier")),
    Term("external prefix cache hit", "luggage fetched from the back room", "從後面房間拿回來的行李",
         "Tokens of a request found in a KV connector's store (here the CPU tier) rather than in the GPU "
         "pool: vLLM's `external_prefix_cache_hits`, beside `external_prefix_cache_queries`.", False,
         ("external prefix cache hits", "external_prefix_cache_hits")),
    # --- speculative decoding (notebook 10): pencilled guesses, our words in the story's style ---
    Term("speculative decoding", "pencilling in the next words and checking them all in one round",
         "先用鉛筆寫下後面幾個字，一輪一起核對",
         "A step schedules a request's last token and k drafted tokens, scores them in one forward pass, and "
         "keeps the drafts the target agrees with plus one token of its own (vLLM `speculative_config`).",
         False, ("speculation", "spec decode")),
    Term("draft token", "a pencilled word", "鉛筆寫的字",
         "A cheap guess at a later token, verified by the target model in the next step; it has a slot "
         "and its K and V are written before anyone knows whether it stays.", False,
         ("draft tokens", "draft", "drafts")),
    Term("n-gram proposer", "copying what the traveller said last time", "照旅客上次說過的抄",
         "Drafts the tokens that followed the first earlier occurrence of the request's last n tokens "
         "(vLLM `NgramProposer`, `prompt_lookup_min`..`prompt_lookup_max`); no model runs.", False,
         ("NgramProposer", "proposer", "n-gram drafts")),
    Term("acceptance rate", "the share of pencilled words inked in", "鉛筆字被描成墨水的比例",
         "Accepted draft tokens over verified ones (vLLM metrics `spec_decode_num_accepted_tokens` / "
         "`spec_decode_num_draft_tokens`); a step yields (1 − a^(k+1)) / (1 − a) tokens on average.", False,
         ("acceptance",)),
    Term("rollback", "moving the count of finished words back", "把寫完的字數往回調",
         "After a rejection `num_computed_tokens` goes back past the rejected drafts; their slots and blocks "
         "stay with the request and are written over by the next step (vLLM `update_from_output`).", False,
         ("roll back", "rolled back", "rolls back")),
    Term("rejection sampling", "a fair check of a guess by chance", "用機率公平地核對猜測",
         "Accept a draft x with probability min(1, p(x)/q(x)), else draw from max(p − q, 0): the kept "
         "token follows the target's p exactly (vLLM `RejectionSampler`).", False,
         ("rejection sampler", "RejectionSampler", "rejection rule")),
)

_BY_NAME = {}
for _t in TERMS:
    for _key in (_t.name, *_t.aliases):
        if _key.lower() in _BY_NAME:
            raise RuntimeError(f"glossary: {_key!r} names two terms")  # an editing mistake; caught on import
        _BY_NAME[_key.lower()] = _t


# Story words the series no longer uses, each with the word of the one mapping that replaces it.
RETIRED: dict[str, str] = {
    "ticket": "Ah-Ye's lookup table (the block table)",
    "ledger": "Ah-Ye's lookup table (the block table)",
    "Ah-Ye's notebook": "Ah-Ye's lookup table (the block table)",
    "her notebook": "her lookup table (the block table)",
    "A-Page": "Ah-Ye",
    "cloakroom": "pages moved out and back in (swap)",
}
_RETIRED = re.compile(r"\b(" + "|".join(re.escape(w) for w in RETIRED) + r")\b", re.IGNORECASE)
# A locker is a page, a block; a place in it is a slot: "lockers (KV slots)", "a page (slot)" or "a row of
# lockers (a block)" breaks the mapping.
_MISMAPPED = (
    (re.compile(r"\blockers?\s*\((?:KV )?slots?\b", re.IGNORECASE),
     "a locker is a page (a block), not a slot"),
    (re.compile(r"\bpages?\s*\((?:KV )?slots?\b", re.IGNORECASE),
     "a page is a block (one locker), not a slot"),
    (re.compile(r"\brows? of lockers\s*\((?:a |KV )?blocks?\b", re.IGNORECASE),
     "a block is one locker (a page), not a row of lockers"),
    (re.compile(r"\bstory\b(?:[^.\n]|i\.e\.){0,40}\b(?:draws|uses|has|is)\b(?:[^.\n]|i\.e\.){0,30}"
                r"\bblock[_ ]size(?: =|:| of| is)? 1\b"
                r"|\bblock[_ ]size(?: =|:| of| is)? 1\b[^.\n]{0,30}\b(?:as in|like|in) the (?:seed )?story\b"
                r"|\bpage of block[_ ]size 1\b", re.IGNORECASE),
     "the story's locker holds 16 tokens (「例如 16 個」), never block_size 1"),
)


def metaphor_problems(text: str) -> list[str]:
    """Where ``text`` breaks the series' one metaphor: a retired story word, or a locker or page glossed
    as the wrong serving term. Empty when it keeps the mapping."""
    problems = [f"{m.group(0)!r}: say {RETIRED[_canon(m.group(0))]}" for m in _RETIRED.finditer(text)]
    for pattern, why in _MISMAPPED:
        problems += [f"{m.group(0)!r}: {why}" for m in pattern.finditer(text)]
    return problems


def _canon(word: str) -> str:
    return next(w for w in RETIRED if w.lower() == word.lower())


def lookup(name: str) -> Term:
    """The term called ``name`` (its serving name or an alias, any case)."""
    if not isinstance(name, str):
        raise TypeError(f"name must be a string, got {type(name).__name__}")
    try:
        return _BY_NAME[name.strip().strip("`").lower()]
    except KeyError:
        close = difflib.get_close_matches(name.lower(), _BY_NAME, n=3)
        hint = f"; did you mean {close}?" if close else f"; known terms: {[t.name for t in TERMS]}"
        raise KeyError(f"{name!r} is not in paged_lab.classroom.glossary{hint}") from None


def knows(name: str) -> bool:
    try:
        lookup(name)
    except KeyError:
        return False
    return True


HEADER = ("Story", "Serving name", "What it is")  # each language's reader sees the story's words in it
SEED_NOTE = "※ the story's own word"  # under the Chinese table, where a Chinese word carries ※


def shown(term: Term) -> Term:
    """``term`` as the learner reads it: its one-line meaning in their language (``paged_lab.viz.i18n``;
    the catalogue's ``"glossary"`` section, keyed by the serving name), the term itself in English."""
    language = i18n.lang()
    if language == "en":
        return term
    zh = i18n.catalogue(language).get("glossary", {}).get(term.name)
    if not zh:
        i18n.note_missing(f"glossary: {term.name}")
        return term
    return dataclasses.replace(term, meaning=zh["meaning"])


def _row(term: Term) -> tuple[str, str, str]:
    """One row in the learner's language: the story's word in it (the Chinese one with ※ where it is the
    story's own), the serving name (as the term table writes it: KV Cache), the meaning."""
    if i18n.lang() == "en":
        return term.story, term.name, term.meaning
    name = term.name.replace("KV cache", "KV Cache")  # as the zh-TW term table writes it
    return term.story_zh + (" ※" if term.seed else ""), name, term.meaning


def table(names: Iterable[str]) -> Table:
    """The glossary rows for ``names`` (serving names or aliases), in the order given."""
    if isinstance(names, str):
        raise TypeError("names must be a list of term names, not one string")
    terms = [lookup(n) for n in names]
    if not terms:
        raise ValueError("names must list at least one term")
    seen = set()
    for n, t in zip(names, terms):
        if t.name in seen:
            raise ValueError(f"{n!r} repeats the term {t.name!r}")
        seen.add(t.name)
    rows = [_row(shown(t)) for t in terms]  # meanings in the learner's language
    note = None if i18n.lang() == "en" else SEED_NOTE
    return Table(HEADER, rows, bold=(1,), prose=(2,), code=(2,), note=note)


def markdown() -> str:
    """``docs/glossary.md``: the whole glossary, in the series' order."""
    intro = __doc__.split("\n\n", 1)[1].split("A notebook shows")[0].strip()
    rows = [(t.story, t.story_zh + (" ※" if t.seed else ""), t.name, t.meaning) for t in TERMS]
    both = Table(("Story", "故事", "Serving name", "What it is"), rows, bold=(2,), prose=(3,))
    return (
        "# Glossary\n\n"
        "<!-- Generated from paged_lab/classroom/glossary.py by `python scripts/build_glossary.py`; "
        "do not edit. -->\n\n"
        f"{intro}\n\n{both._repr_markdown_()}\n\n"
        "※ the story's own word; the other Chinese words are ours, in its style. A notebook shows one "
        "language's column: the English edition the story's English words, the zh-TW edition the Chinese.\n"
    )
