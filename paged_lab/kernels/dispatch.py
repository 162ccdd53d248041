"""Which backend runs: the backend table, the choice among its backends, and the public entry points.

Backends (``BACKEND_TABLE``; a backend's name says what runs). Each is a module with the same functions
and signatures, those of :mod:`~paged_lab.kernels.reference` (``store_kv``, ``paged_attention_decode``,
``paged_attention_prefill``; ``store_and_decode`` where it has one kernel for both, ``unsupported(k_cache,
v_cache, q)`` where it cannot take every cache: why not, or None):
- ``"triton"``: :mod:`~paged_lab.kernels.triton_paged` (compiled on CUDA; Triton's interpreter on CPU,
  slow, for tests), imported on first use.
- ``"cpu"``: the C kernels of :mod:`~paged_lab.kernels.cpu.attention` (CPU fp32, AVX-512), built on first use.
- ``"torch"``: the vectorized torch path (:mod:`~paged_lab.kernels.torch_paged`), torch only.
- ``"reference"``: the per-sequence readable loop (:mod:`~paged_lab.kernels.reference`).
- ``"auto"``: the first that can take the tensors of Triton on CUDA, ``"cpu"``, ``"torch"``.

One call path. The choice (:func:`choose_backend`) gives a :class:`ChosenBackend`, whose functions run
the backend with no further choice. The public entry points (:func:`store_kv`, :func:`paged_attention_decode`,
:func:`store_and_decode`, :func:`paged_attention_prefill`: what notebook 06 and the tests call) check their
arguments (:mod:`~paged_lab.kernels.checks`), choose, and call it; an engine, which calls attention once
per layer per step, chooses once when it is built and checks each step's tensors once.

One fallback rule (:func:`_run_first`): under ``"auto"``, a backend that raises (a launch on an untested
GPU, say) is logged once and counted in a :class:`KernelStats`, and that call runs on the next
candidate; the next call tries the first again. A backend named explicitly raises its error.

The arguments every entry point takes besides its tensors:
- ``backend``: one of :data:`BACKENDS`; ``stats``: the :class:`KernelStats` to count in (default ``STATS``).
- ``plan`` (the ``"torch"`` and ``"cpu"`` backends read it): the batch's precomputed
  :class:`~paged_lab.kernels.torch_paged.GatherPlan`. The checks verify that it is the plan ``plan_gather``
  builds from this call's tensors (one that is not raises a ValueError naming ``plan``), because the
  backends index the cache through it unchecked.
- ``k_scale``/``v_scale``: an fp8 cache (``torch.float8_e4m3fn``) stores ``x / scale`` and is read as
  ``x * scale`` (:mod:`~paged_lab.kernels.quant`); a float cache ignores them.
- ``sliding_window=W`` (decode and prefill): the query at position p reads keys p - W + 1 .. p only
  (``NULL_BLOCK`` entries before every query's window are never read). The ``"torch"`` and
  ``"reference"`` backends take it; the C and Triton kernels attend over the whole context, so
  ``"auto"`` skips them for a windowed call (``ChosenBackend.skipped`` says why) and naming one raises.
- ``validate=False`` skips every check, the plan's included. **Trusted input only.** The C kernels and
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
from types import SimpleNamespace

import torch

from paged_lab.kernels import checks, reference, torch_paged
from paged_lab.kernels._interpret import load_kernels, triton_available
from paged_lab.kernels.cpu import attention as cpu_attention


# ---------------------------------------------------------------------------------- the backends
@dataclass(frozen=True)
class Backend:
    """One backend: what it runs for each operation, and what it cannot take.

    Every function has the signature of :mod:`~paged_lab.kernels.reference`'s (``store_and_decode``:
    ``store_kv``'s and ``paged_attention_decode``'s arguments together). ``unsupported(k_cache, v_cache,
    q)`` says why the backend cannot take these tensors, or None. ``uses_plan``: it reads the GatherPlan,
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
    """store_and_decode for a backend that has no kernel for both: its store, then its decode."""
    def run(q, k, v, k_cache, v_cache, slot_mapping, block_tables, context_lens, scale, k_scale=1.0,
            v_scale=1.0, sliding_window=None, *, plan=None):
        store(k, v, k_cache, v_cache, slot_mapping, k_scale, v_scale, plan=plan)
        return decode(q, k_cache, v_cache, block_tables, context_lens, scale, k_scale, v_scale,
                      sliding_window, plan=plan)
    return run


def _backend(name: str, module, **facts) -> Backend:
    """The table's entry for a backend module: its functions, as they are (``store_and_decode`` and
    ``unsupported`` where it has them)."""
    fused = getattr(module, "store_and_decode", None)
    if hasattr(module, "unsupported"):
        facts["unsupported"] = module.unsupported
    return Backend(name, module.store_kv, module.paged_attention_decode, module.paged_attention_prefill,
                   fused or _store_then_decode(module.store_kv, module.paged_attention_decode), **facts)


def _on_first_call(op: str) -> Callable:
    """:mod:`~paged_lab.kernels.triton_paged`'s function ``op``, the module imported on the first call
    (importing triton is slow, and on a CPU it must follow ``TRITON_INTERPRET``: see ``_interpret``)."""
    def run(first, *args, **kwargs):  # first: k, q or k_cache, on the device the kernels run on
        return getattr(load_kernels(first.device.type), op)(first, *args, **kwargs)
    return run


_TRITON = SimpleNamespace(**{op: _on_first_call(op) for op in (
    "store_kv", "paged_attention_decode", "paged_attention_prefill", "unsupported")})

# The backend table: the name a caller passes -> what runs. "auto" is not a backend but a choice
# among these (see _candidates).
BACKEND_TABLE: dict[str, Backend] = {
    "triton": _backend("triton", _TRITON),
    "cpu": _backend("cpu", cpu_attention, uses_plan=True),
    "torch": _backend("torch", torch_paged, uses_plan=True, takes_window=True),
    "reference": _backend("reference", reference, takes_window=True),
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
    """The backend chosen once (:func:`choose_backend`), and the calls that run it: no choice per call and
    no argument checks (an entry point checks its call's arguments; the engine checks each step's tensors
    once, ``checks.check_step``). ``names``: the candidates in order, the one that runs first; more than
    one only under "auto", where each call follows the fallback rule (:func:`_run_first`)."""

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

    def decode(self, q, k_cache, v_cache, block_tables, context_lens, scale: float, plan: StepPlan,
               num_splits: int | None = None, k_scale: float = 1.0, v_scale: float = 1.0):
        return _run_first(self.backends, self.stats, "decode", q, k_cache, v_cache, block_tables,
                          context_lens, scale, plan=plan.gather, num_splits=num_splits, k_scale=k_scale,
                          v_scale=v_scale, **self._window(plan))

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
# Each checks its call's arguments, chooses (choose_backend) and runs the ChosenBackend. The arguments
# besides the tensors (backend, validate, plan, stats, k_scale/v_scale, sliding_window) are the module
# docstring's.
def _choice(backend: str, stats: KernelStats | None, k_cache, v_cache, q=None,
            sliding_window: int | None = None) -> ChosenBackend:
    return choose_backend(backend, k_cache, v_cache, q, STATS if stats is None else stats, sliding_window)


def store_kv(k, v, k_cache, v_cache, slot_mapping, backend: str = "auto", validate: bool = True,
             plan=None, stats: KernelStats | None = None, k_scale: float = 1.0, v_scale: float = 1.0) -> None:
    """Write each token's K/V into its slot of the paged cache, in place.

    k, v: ``[num_tokens, num_kv_heads, head_dim]``; k_cache, v_cache:
    ``[num_blocks, block_size, num_kv_heads, head_dim]``; slot_mapping: int ``[num_tokens]``,
    ``slot = block * block_size + offset``; a negative slot skips that token (padding)."""
    checks.check_kv_scales(k_scale, v_scale)
    if validate:
        checks.check_store_kv(k, v, k_cache, v_cache, slot_mapping)
        checks.check_plan(plan, k_cache, slot_mapping=slot_mapping)
    chosen = _choice(backend, stats, k_cache, v_cache)  # a bad backend name raises, with no tokens too
    if k.shape[0] > 0:
        chosen.store_kv(k, v, k_cache, v_cache, slot_mapping, StepPlan(plan), k_scale, v_scale)


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
    log-sum-exp (flash-decoding); ``None`` lets the kernel choose, 1 forces the unsplit path."""
    checks.check_kv_scales(k_scale, v_scale)
    checks.check_sliding_window(sliding_window)
    if validate:
        checks.check_decode(q, k_cache, v_cache, block_tables, context_lens, scale, sliding_window)
        checks.check_plan(plan, k_cache, sliding_window, block_tables=block_tables, context_lens=context_lens)
    checks.check_num_splits(num_splits)
    if q.shape[0] == 0:
        _choice(backend, stats, k_cache, v_cache, None, sliding_window)
        return torch.empty_like(q)
    return _choice(backend, stats, k_cache, v_cache, q, sliding_window).decode(
        q, k_cache, v_cache, block_tables, context_lens, float(scale),
        StepPlan(plan, sliding_window=sliding_window), num_splits, k_scale, v_scale)


def store_and_decode(q, k, v, k_cache, v_cache, slot_mapping, block_tables, context_lens, scale,
                     backend: str = "auto", validate: bool = True, plan=None,
                     stats: KernelStats | None = None, k_scale: float = 1.0, v_scale: float = 1.0,
                     sliding_window: int | None = None):
    """:func:`store_kv` then :func:`paged_attention_decode`, in one call where the backend has one
    kernel for both (``"cpu"``; ``"torch"`` with a plan and a layer's K/V as the halves of one tensor,
    as ``engine.KVCache`` keeps them). Arguments as those two functions'; q ``[num_seqs, num_heads,
    head_dim]``, k, v ``[num_seqs, num_kv_heads, head_dim]``."""
    checks.check_kv_scales(k_scale, v_scale)
    checks.check_sliding_window(sliding_window)
    if validate:
        checks.check_store_kv(k, v, k_cache, v_cache, slot_mapping)
        checks.check_decode(q, k_cache, v_cache, block_tables, context_lens, scale, sliding_window)
        checks.check_plan(plan, k_cache, sliding_window, block_tables=block_tables, context_lens=context_lens,
                          slot_mapping=slot_mapping)
    if q.shape[0] == 0:
        _choice(backend, stats, k_cache, v_cache, None, sliding_window)
        return torch.empty_like(q)
    return _choice(backend, stats, k_cache, v_cache, q, sliding_window).store_and_decode(
        q, k, v, k_cache, v_cache, slot_mapping, block_tables, context_lens, float(scale),
        StepPlan(plan, sliding_window=sliding_window), k_scale, v_scale)


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
    the caller knows it (the engine does); Triton sizes its grid with it, else reads it from the device."""
    checks.check_kv_scales(k_scale, v_scale)
    checks.check_sliding_window(sliding_window)
    if validate:
        checks.check_prefill(q, k_cache, v_cache, block_tables, context_lens, query_start_loc, scale,
                             max_query_len, sliding_window)
        checks.check_plan(plan, k_cache, sliding_window, block_tables=block_tables, context_lens=context_lens,
                          query_start_loc=query_start_loc)
    if q.shape[0] == 0:
        _choice(backend, stats, k_cache, v_cache, None, sliding_window)
        return torch.empty_like(q)
    return _choice(backend, stats, k_cache, v_cache, q, sliding_window).prefill(
        q, k_cache, v_cache, block_tables, context_lens, query_start_loc, float(scale),
        StepPlan(plan, sliding_window=sliding_window), max_query_len, k_scale, v_scale)


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
