"""Which backend runs: the backend table, the choice among its backends, and the public entry points.

Backends (``BACKEND_TABLE``; a backend's name says what runs):
- ``"triton"``: the Triton kernels (compiled on CUDA; Triton's interpreter on CPU — slow, for tests).
- ``"cpu"``: the C kernels of :mod:`paged_lab.kernels.cpu_paged` (CPU fp32, AVX-512), built on first use.
- ``"torch"``: the vectorized torch path (:mod:`paged_lab.kernels.torch_paged`), torch only.
- ``"reference"``: the per-sequence readable loop (:mod:`paged_lab.kernels.reference`).
- ``"auto"``: the first that can take the tensors of Triton on CUDA, ``"cpu"``, ``"torch"``.

Two ways in. The public entry points (:func:`store_kv`, :func:`paged_attention_decode`,
:func:`store_and_decode`, :func:`paged_attention_prefill`) check their arguments
(:mod:`paged_lab.kernels.checks`) and choose the backend on every call: what notebook 06 and the tests
call. An engine, which calls attention once per layer per step, chooses once when it is built
(:func:`choose_backend`) and calls the :class:`ChosenBackend`'s functions, with no per-call choice.

One fallback rule (:func:`_run_first`), both ways: under ``"auto"``, a backend that raises (a launch
on an untested GPU, say) is logged once and counted in a :class:`KernelStats`, and that call runs on
the next candidate; the next call tries the first again. A backend named explicitly raises its error.

``plan`` (the ``"torch"`` and ``"cpu"`` backends read it) is the batch's precomputed
:class:`~paged_lab.kernels.torch_paged.GatherPlan`. It is an argument like the others: the checks
verify that it is the plan ``plan_gather`` builds from this call's tensors (one that is not raises
a ValueError naming ``plan``), because the backends index the cache through it unchecked.

A sliding-window layer passes ``sliding_window=W`` (the query at position p reads keys p - W + 1 .. p;
``NULL_BLOCK`` entries before every query's window are never read). The ``"torch"`` and ``"reference"``
backends take it; the C and Triton kernels attend over the whole context, so ``"auto"`` skips them for
a windowed call (``ChosenBackend.skipped`` says why) and naming one raises.

``validate=False`` skips every check, the plan's included. **Trusted input only.** The C kernels and
the Triton kernels (its CPU interpreter too) use every index as given, so an out-of-range block id,
context length, slot or query offset, or a plan from another batch, is undefined behaviour: it may
read or write outside the cache, return garbage, or crash the process (a segfault). Keep
``validate=True`` unless the same arguments were validated already.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from paged_lab.kernels import checks, cpu_paged, reference, torch_paged
from paged_lab.kernels._interpret import TRITON_BLOCK_SIZES as TRITON_BLOCK_SIZES  # (re-exported)
from paged_lab.kernels._interpret import TRITON_HEAD_DIMS as TRITON_HEAD_DIMS
from paged_lab.kernels._interpret import load_kernels, triton_available
from paged_lab.kernels._interpret import triton_unsupported as _triton_unsupported


# ---------------------------------------------------------------------------------- the backends
def _tables(plan, block_tables, context_lens):
    """The C kernels read int64 tables and lengths: the step's plan holds them already (no per-layer copy)."""
    return (block_tables, context_lens) if plan is None else (plan.table, plan.lens)


# The C and Triton kernels read float caches only (their ``unsupported`` says so for an fp8 one), so the
# k_scale / v_scale an fp8 cache needs never reach them: they take the arguments and have no use for them.
def _cpu_decode(q, k_cache, v_cache, block_tables, context_lens, scale, plan=None, **_):
    tables, lens = _tables(plan, block_tables, context_lens)
    return cpu_paged.decode(q, None, None, k_cache, v_cache, None, tables, lens, scale)


def _cpu_prefill(q, k_cache, v_cache, block_tables, context_lens, query_start_loc, scale, plan=None, **_):
    tables, lens = _tables(plan, block_tables, context_lens)
    return cpu_paged.prefill(q, k_cache, v_cache, tables, lens, query_start_loc, scale)


def _cpu_store_and_decode(q, k, v, k_cache, v_cache, slot_mapping, block_tables, context_lens, scale,
                          plan=None, **_):
    tables, lens = _tables(plan, block_tables, context_lens)
    return cpu_paged.decode(q, k, v, k_cache, v_cache, slot_mapping, tables, lens, scale)


def _triton(k_cache):
    return load_kernels(k_cache.device.type)


@dataclass(frozen=True)
class Backend:
    """One backend: what it runs for each operation, and what it cannot take.

    Every function has the entry point's arguments (``plan``: the step's GatherPlan or None;
    ``num_splits``/``max_query_len``: hints a backend may ignore; ``k_scale``/``v_scale``, keywords: an fp8
    cache's scales, which a float cache ignores). ``unsupported(k_cache, v_cache, q)``
    says why the backend cannot take these tensors, or None. ``uses_plan``: it reads the GatherPlan,
    so a caller running many layers should build one per step (``torch_paged.plan_gather``).
    ``takes_window``: its decode and prefill take ``sliding_window=`` (the others are never given one)."""

    name: str
    store_kv: Callable
    decode: Callable
    prefill: Callable
    store_and_decode: Callable
    unsupported: Callable[..., str | None] = lambda k_cache, v_cache, q=None: None
    uses_plan: bool = False
    takes_window: bool = False


def _store_then_decode(store, decode):
    """store_and_decode for a backend that has no fused kernel: its store, then its decode."""
    def run(q, k, v, k_cache, v_cache, slot_mapping, block_tables, context_lens, scale, plan=None,
            sliding_window=None, **kv_scales):
        store(k, v, k_cache, v_cache, slot_mapping, plan=plan, **kv_scales)
        window = {} if sliding_window is None else {"sliding_window": sliding_window}
        return decode(q, k_cache, v_cache, block_tables, context_lens, scale, plan=plan, **window,
                      **kv_scales)
    return run


def _reference_backend() -> Backend:
    store = lambda k, v, kc, vc, slots, plan=None, k_scale=1.0, v_scale=1.0: reference.store_kv(
        k, v, kc, vc, slots, k_scale, v_scale)
    def decode(q, kc, vc, bt, cl, scale, plan=None, k_scale=1.0, v_scale=1.0, sliding_window=None, **_):
        return reference.paged_attention_decode(q, kc, vc, bt, cl, scale, k_scale, v_scale, sliding_window)

    def prefill(q, kc, vc, bt, cl, qsl, scale, plan=None, k_scale=1.0, v_scale=1.0, sliding_window=None, **_):
        return reference.paged_attention_prefill(q, kc, vc, bt, cl, qsl, scale, k_scale, v_scale,
                                                 sliding_window)

    return Backend("reference", store, decode, prefill, _store_then_decode(store, decode), takes_window=True)


def _triton_backend() -> Backend:
    store = lambda k, v, kc, vc, slots, plan=None, **_: _triton(kc).store_kv(k, v, kc, vc, slots)
    decode = lambda q, kc, vc, bt, cl, scale, plan=None, num_splits=None, **_: _triton(
        kc).paged_attention_decode(q, kc, vc, bt, cl, scale, num_splits=num_splits)
    prefill = lambda q, kc, vc, bt, cl, qsl, scale, plan=None, max_query_len=None, **_: _triton(
        kc).paged_attention_prefill(q, kc, vc, bt, cl, qsl, scale, max_query_len=max_query_len)
    return Backend("triton", store, decode, prefill, _store_then_decode(store, decode), _triton_unsupported)


def _torch_backend() -> Backend:
    def decode(q, kc, vc, bt, cl, scale, plan=None, k_scale=1.0, v_scale=1.0, sliding_window=None, **_):
        return torch_paged.paged_attention_decode(q, kc, vc, bt, cl, scale, plan=plan, k_scale=k_scale,
                                                  v_scale=v_scale, sliding_window=sliding_window)

    def prefill(q, kc, vc, bt, cl, qsl, scale, plan=None, max_query_len=None, k_scale=1.0, v_scale=1.0,
                sliding_window=None):
        return torch_paged.paged_attention_prefill(q, kc, vc, bt, cl, qsl, scale, plan=plan,
                                                   max_query_len=max_query_len, k_scale=k_scale,
                                                   v_scale=v_scale, sliding_window=sliding_window)

    return Backend("torch", torch_paged.store_kv, decode, prefill, torch_paged.torch_store_and_decode,
                   uses_plan=True, takes_window=True)


# The backend table: the name a caller passes -> what runs. "auto" is not a backend but a choice
# among these (see _candidates).
BACKEND_TABLE: dict[str, Backend] = {
    "triton": _triton_backend(),
    # C kernels (cpu_paged) for attention; they store K/V inside store_and_decode, a plain store_kv is torch's
    "cpu": Backend("cpu", torch_paged.store_kv, _cpu_decode, _cpu_prefill, _cpu_store_and_decode,
                   lambda k_cache, v_cache, q=None: cpu_paged.why_unusable(k_cache, v_cache, q),
                   uses_plan=True),
    "torch": _torch_backend(),
    "reference": _reference_backend(),
}
BACKENDS = ("auto", *BACKEND_TABLE)


# ------------------------------------------------------------------------- the choice, the fallback
logger = logging.getLogger("paged_lab.kernels")


@dataclass
class KernelStats:
    """What the dispatch ran: calls per backend, and the failures ``"auto"`` fell back from.
    Pass one as ``stats=`` (the engine keeps its own); without it calls count in ``dispatch.STATS``."""

    calls: Counter = field(default_factory=Counter)  # backend name -> calls it completed
    failures: Counter = field(default_factory=Counter)  # backend name -> calls that raised (then fell back)
    last_error: dict = field(default_factory=dict)  # backend name -> "op: ErrorType: message"

    def as_dict(self) -> dict:
        return {"calls": dict(self.calls), "failures": dict(self.failures),
                "last_error": dict(self.last_error)}


STATS = KernelStats()


def _why_not(name: str, k_cache, v_cache, q=None, sliding_window: int | None = None) -> str | None:
    """Why backend ``name`` cannot take these tensors (and this window), or None when it can."""
    backend = BACKEND_TABLE[name]
    if sliding_window is not None and not backend.takes_window:
        return (f"a sliding window (sliding_window={sliding_window}; the {name} kernels attend over the "
                f"whole context, the torch backend masks the window)")
    return backend.unsupported(k_cache, v_cache, q)


def _candidates(backend: str, k_cache, v_cache, q=None, sliding_window: int | None = None) -> list[str]:
    """The backends to try, in order. A named backend is the only one (it raises when it cannot take
    these tensors); "auto" lists every backend that can: Triton on CUDA, then the C kernels, then torch."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend != "auto":
        why = _why_not(backend, k_cache, v_cache, q, sliding_window)
        if why is not None:
            raise ValueError(f"backend={backend!r} does not support {why}; use backend='torch'")
        return [backend]
    return [n for n in _auto_order(k_cache) if _why_not(n, k_cache, v_cache, q, sliding_window) is None]


def _auto_order(k_cache) -> list[str]:
    """The backends "auto" tries on this cache's device, best first."""
    return ["triton", "cpu", "torch"] if k_cache.is_cuda and triton_available() else ["cpu", "torch"]


def resolve_backend(backend: str, k_cache, v_cache=None, q=None) -> str:
    """The concrete backend that runs for ``backend`` ("auto" included) on these tensors."""
    return _candidates(backend, k_cache, k_cache if v_cache is None else v_cache, q)[0]


def uses_plan(backend: str, k_cache, v_cache=None) -> bool:
    """Whether a backend that may run here reads a GatherPlan (worth building once per step)."""
    v_cache = k_cache if v_cache is None else v_cache
    return any(BACKEND_TABLE[n].uses_plan for n in _candidates(backend, k_cache, v_cache))


def _run_first(backends: tuple[Backend, ...], stats: KernelStats, op: str, *args, **kwargs):
    """The one fallback rule: run ``op`` on the first of ``backends``. When there are several ("auto"),
    a backend that raises is logged and counted, and the call runs on the next; the next call tries
    the first one again (one failure does not switch a backend off). The last one's error is raised."""
    last = len(backends) - 1
    for i, backend in enumerate(backends):
        try:
            out = getattr(backend, op)(*args, **kwargs)
        except Exception as e:  # a compile/launch error on an untested GPU, a library that cannot run
            if i == last:
                raise
            _record_failure(stats, backend.name, op, e, backends[i + 1].name)
            continue
        stats.calls[backend.name] += 1
        return out


def _record_failure(stats: KernelStats, name: str, op: str, error: Exception, instead: str) -> None:
    message = f"{op}: {type(error).__name__}: {error}"
    if stats.last_error.get(name) != message:  # log each distinct error once, count every one
        logger.warning("backend='auto': %s failed (%s); this call runs on %r. Pass backend=%r to raise "
                       "the error instead.", name, message[:300], instead, name)
    stats.failures[name] += 1
    stats.last_error[name] = message


def _run(op: str, backend: str, stats: KernelStats | None, k_cache, v_cache, q, *args, **kwargs):
    """A public entry point's call: choose among the candidates for these tensors, then the fallback rule."""
    names = _candidates(backend, k_cache, v_cache, q, kwargs.get("sliding_window"))
    return _run_first(tuple(BACKEND_TABLE[n] for n in names), STATS if stats is None else stats, op,
                      *args, **kwargs)


@dataclass
class StepPlan:
    """What the chosen backend prepared for one batch of a step; every layer of the step reads it.

    ``gather``: the GatherPlan of the backends that read one (torch, the C kernels): the step's indices
    and masks, built once instead of once per layer; None for the others. ``checked``: the first layer
    that used this plan checked its q, k and v (``checks.check_layer``); the later layers of the step
    get the same shapes and skip that. ``sliding_window``: the window of the layers that read it (their
    metadata's), passed to every attention call of the plan."""

    gather: torch_paged.GatherPlan | None = None
    checked: bool = False
    sliding_window: int | None = None


class ChosenBackend:
    """The attention backend of one engine, chosen once (:func:`choose_backend`), and the calls every
    layer of every step makes: no choice per call and no argument checks (the engine checks each step's
    tensors once, ``checks.check_step``). ``names``: the candidates in order, the one that runs first;
    more than one only under "auto", where the fallback rule holds as for the public entry points."""

    def __init__(self, names: tuple[str, ...], stats: KernelStats, skipped: dict[str, str] | None = None):
        self.names = names
        self.backends = tuple(BACKEND_TABLE[n] for n in names)
        self.stats = stats
        self.skipped = dict(skipped or {})  # "auto" only: backend -> why it cannot take these caches
        # Plans follow the chosen backend: behind Triton (no plan) a torch fallback gets none and builds
        # its own indices, rather than every step paying for a plan that only a failure would read
        self.uses_plan = self.backends[0].uses_plan

    @property
    def name(self) -> str:
        return self.names[0]

    def plan(self, block_tables, context_lens, slot_mapping, block_size: int, query_start_loc=None,
             max_context_len: int | None = None, max_query_len: int | None = None,
             sliding_window: int | None = None) -> StepPlan:
        """This backend's plan of one batch (``query_start_loc`` None for a decode batch)."""
        if sliding_window is not None and not all(b.takes_window for b in self.backends):
            raise ValueError(f"sliding_window={sliding_window}: backends {list(self.names)} were chosen for "
                             f"full attention; choose with choose_backend(..., sliding_window=...)")
        if not self.uses_plan:
            return StepPlan(sliding_window=sliding_window)
        return StepPlan(torch_paged.plan_gather(
            block_tables, context_lens, block_size, max_ctx=max_context_len, query_start_loc=query_start_loc,
            slot_mapping=slot_mapping, max_query_len=max_query_len, sliding_window=sliding_window),
            sliding_window=sliding_window)

    @staticmethod
    def _window(plan: StepPlan) -> dict:
        """The window keyword of a plan's attention calls: none for full attention, so that a backend
        that takes no window is never handed one."""
        return {} if plan.sliding_window is None else {"sliding_window": plan.sliding_window}

    # k_scale, v_scale: the layer's fp8 scales (a float cache ignores them)
    def store_kv(self, k, v, k_cache, v_cache, slot_mapping, plan: StepPlan, k_scale: float = 1.0,
                 v_scale: float = 1.0):
        _run_first(self.backends, self.stats, "store_kv", k, v, k_cache, v_cache, slot_mapping,
                   plan=plan.gather, k_scale=k_scale, v_scale=v_scale)

    def store_and_decode(self, q, k, v, k_cache, v_cache, slot_mapping, block_tables, context_lens,
                         scale: float, plan: StepPlan, k_scale: float = 1.0, v_scale: float = 1.0):
        return _run_first(self.backends, self.stats, "store_and_decode", q, k, v, k_cache, v_cache,
                          slot_mapping, block_tables, context_lens, scale, plan=plan.gather, k_scale=k_scale,
                          v_scale=v_scale, **self._window(plan))

    def prefill(self, q, k_cache, v_cache, block_tables, context_lens, query_start_loc, scale: float,
                plan: StepPlan, max_query_len: int | None = None, k_scale: float = 1.0, v_scale: float = 1.0):
        return _run_first(self.backends, self.stats, "prefill", q, k_cache, v_cache, block_tables,
                          context_lens, query_start_loc, scale, plan=plan.gather, max_query_len=max_query_len,
                          k_scale=k_scale, v_scale=v_scale, **self._window(plan))


def choose_backend(backend: str, k_cache, v_cache=None, q=None,
                   stats: KernelStats | None = None, sliding_window: int | None = None) -> ChosenBackend:
    """Choose once what runs for ``backend`` ("auto" included) on caches like these (and a q like ``q``:
    its heads and dtype; its length does not matter). A named backend that cannot take them raises now.
    ``sliding_window``: some layers attend through a window of that many tokens (a backend that takes
    none is not chosen for any layer: one backend per engine).

    Under "auto", a backend that would come first but cannot take these caches (the C kernels and an fp8
    cache, say) is skipped: the choice says why in ``ChosenBackend.skipped`` and logs it once (INFO)."""
    v_cache = k_cache if v_cache is None else v_cache
    names = tuple(_candidates(backend, k_cache, v_cache, q, sliding_window))
    skipped = {} if backend != "auto" else _skipped(k_cache, v_cache, q, names[0], sliding_window)
    return ChosenBackend(names, KernelStats() if stats is None else stats, skipped)


_SKIPS_LOGGED: set[str] = set()


def _skipped(k_cache, v_cache, q, chosen: str, sliding_window: int | None = None) -> dict[str, str]:
    """The backends "auto" prefers to ``chosen`` on this device that cannot take these tensors, with why
    (each distinct reason logged once per process, so that a notebook says it once, not per engine)."""
    order = _auto_order(k_cache)
    skipped = {}
    for name in order[:order.index(chosen)] if chosen in order else order:
        why = _why_not(name, k_cache, v_cache, q, sliding_window)
        if why is None:
            continue
        skipped[name] = why
        message = f"backend='auto': {name} cannot take {why}; {chosen!r} runs instead"
        if message not in _SKIPS_LOGGED:
            _SKIPS_LOGGED.add(message)
            logger.info(message)
    return skipped


# -------------------------------------------------------------------------------- the entry points
def store_kv(k, v, k_cache, v_cache, slot_mapping, backend: str = "auto", validate: bool = True,
             plan=None, stats: KernelStats | None = None, k_scale: float = 1.0, v_scale: float = 1.0) -> None:
    """Write each token's K/V into its slot of the paged cache, in place.

    k, v: ``[num_tokens, num_kv_heads, head_dim]``; k_cache, v_cache:
    ``[num_blocks, block_size, num_kv_heads, head_dim]``; slot_mapping: int ``[num_tokens]``,
    ``slot = block * block_size + offset``; a negative slot skips that token (padding).
    An fp8 cache (``torch.float8_e4m3fn``) stores ``k / k_scale`` and ``v / v_scale``
    (:mod:`paged_lab.kernels.quant`); a float cache ignores the scales.
    ``validate=False``: trusted input only; out-of-range indices are undefined behaviour and may
    crash the process (see the module docstring).
    """
    checks.check_kv_scales(k_scale, v_scale)
    if validate:
        checks.check_store_kv(k, v, k_cache, v_cache, slot_mapping)
        checks.check_plan(plan, k_cache, slot_mapping=slot_mapping)
    if k.shape[0] == 0:
        _candidates(backend, k_cache, v_cache)  # a bad backend name still raises
        return
    _run("store_kv", backend, stats, k_cache, v_cache, None, k, v, k_cache, v_cache, slot_mapping, plan=plan,
         k_scale=k_scale, v_scale=v_scale)


def paged_attention_decode(
    q, k_cache, v_cache, block_tables, context_lens, scale, backend: str = "auto",
    num_splits: int | None = None,
    validate: bool = True, plan=None, stats: KernelStats | None = None, k_scale: float = 1.0,
    v_scale: float = 1.0, sliding_window: int | None = None,
):
    """One query token per sequence over its paged context -> ``[num_seqs, num_heads, head_dim]``.

    q: ``[num_seqs, num_heads, head_dim]``; block_tables: int ``[num_seqs, max_blocks]``;
    context_lens: int ``[num_seqs]`` (includes the query token, already stored with :func:`store_kv`).
    ``num_splits`` (Triton only): split each sequence's context into that many partitions merged by
    log-sum-exp (flash-decoding); ``None`` lets the kernel choose, 1 forces the unsplit path.
    ``k_scale``/``v_scale``: an fp8 cache is read as ``x * scale`` (a float cache ignores them).
    ``sliding_window``: attend to the last that many tokens only (see the module docstring).
    ``validate=False``: trusted input only; out-of-range indices are undefined behaviour and may
    crash the process (see the module docstring).
    """
    checks.check_kv_scales(k_scale, v_scale)
    window = checks.check_sliding_window(sliding_window)
    if validate:
        checks.check_decode(q, k_cache, v_cache, block_tables, context_lens, scale, sliding_window)
        checks.check_plan(plan, k_cache, sliding_window, block_tables=block_tables, context_lens=context_lens)
    checks.check_num_splits(num_splits)
    if q.shape[0] == 0:
        _candidates(backend, k_cache, v_cache, None, sliding_window)
        return torch.empty_like(q)
    return _run("decode", backend, stats, k_cache, v_cache, q, q, k_cache, v_cache, block_tables,
                context_lens, float(scale), plan=plan, num_splits=num_splits, k_scale=k_scale,
                v_scale=v_scale, **window)


def store_and_decode(q, k, v, k_cache, v_cache, slot_mapping, block_tables, context_lens, scale,
                     backend: str = "auto", validate: bool = True, plan=None,
                     stats: KernelStats | None = None, k_scale: float = 1.0, v_scale: float = 1.0,
                     sliding_window: int | None = None):
    """:func:`store_kv` then :func:`paged_attention_decode`, in one call where the backend has one
    kernel for both (``"cpu"``; ``"torch"`` with a plan and a layer's K/V as the halves of one tensor,
    as ``engine.KVCache`` keeps them). Arguments as those two functions'; q ``[num_seqs, num_heads,
    head_dim]``, k, v ``[num_seqs, num_kv_heads, head_dim]``. This is the public entry point; each
    backend's own implementation is its ``Backend.store_and_decode`` (``torch_paged.torch_store_and_decode``,
    ``cpu_paged.decode``...). ``validate=False``: trusted input only; out-of-range indices are
    undefined behaviour and may crash the process (see the module docstring)."""
    checks.check_kv_scales(k_scale, v_scale)
    window = checks.check_sliding_window(sliding_window)
    if validate:
        checks.check_store_kv(k, v, k_cache, v_cache, slot_mapping)
        checks.check_decode(q, k_cache, v_cache, block_tables, context_lens, scale, sliding_window)
        checks.check_plan(plan, k_cache, sliding_window, block_tables=block_tables, context_lens=context_lens,
                          slot_mapping=slot_mapping)
    if q.shape[0] == 0:
        _candidates(backend, k_cache, v_cache, None, sliding_window)
        return torch.empty_like(q)
    return _run("store_and_decode", backend, stats, k_cache, v_cache, q, q, k, v, k_cache, v_cache,
                slot_mapping, block_tables, context_lens, float(scale), plan=plan, k_scale=k_scale,
                v_scale=v_scale, **window)


def paged_attention_prefill(
    q, k_cache, v_cache, block_tables, context_lens, query_start_loc, scale, backend: str = "auto",
    validate: bool = True, plan=None, max_query_len: int | None = None, stats: KernelStats | None = None,
    k_scale: float = 1.0, v_scale: float = 1.0, sliding_window: int | None = None,
):
    """Several causal query tokens per sequence over its paged context ->
    ``[num_tokens, num_heads, head_dim]``.

    q: ``[num_tokens, num_heads, head_dim]``, sequences concatenated; query_start_loc: int
    ``[num_seqs + 1]`` (0, then the cumsum of query lengths). Sequence ``i``'s query tokens are the
    last ``query_len`` positions of its ``context_lens[i]`` tokens (chunked prefill and cached
    prefixes: the earlier context is read from the cache). ``max_query_len``: the longest query, when
    the caller knows it (the engine does); Triton sizes its grid with it, else reads it from the device.
    ``k_scale``/``v_scale``: an fp8 cache is read as ``x * scale`` (a float cache ignores them).
    ``sliding_window``: each query attends to its last that many positions only.
    ``validate=False``: trusted input only; out-of-range indices are undefined behaviour and may
    crash the process (see the module docstring).
    """
    checks.check_kv_scales(k_scale, v_scale)
    window = checks.check_sliding_window(sliding_window)
    if validate:
        checks.check_prefill(q, k_cache, v_cache, block_tables, context_lens, query_start_loc, scale,
                             max_query_len, sliding_window)
        checks.check_plan(plan, k_cache, sliding_window, block_tables=block_tables, context_lens=context_lens,
                          query_start_loc=query_start_loc)
    if q.shape[0] == 0:
        _candidates(backend, k_cache, v_cache, None, sliding_window)
        return torch.empty_like(q)
    return _run("prefill", backend, stats, k_cache, v_cache, q, q, k_cache, v_cache, block_tables,
                context_lens, query_start_loc, float(scale), plan=plan, max_query_len=max_query_len,
                k_scale=k_scale, v_scale=v_scale, **window)


def paged_attention(
    q, k_cache, v_cache, block_tables, context_lens, scale, query_start_loc=None, backend: str = "auto",
    **kwargs
):
    """Decode when ``query_start_loc`` is None (one query per sequence), otherwise (chunked) prefill."""
    if query_start_loc is None:
        return paged_attention_decode(q, k_cache, v_cache, block_tables, context_lens, scale, backend,
                                      **kwargs)
    return paged_attention_prefill(
        q, k_cache, v_cache, block_tables, context_lens, query_start_loc, scale, backend, **kwargs
    )
