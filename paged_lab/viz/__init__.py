"""Pure figure functions (state -> plotly Figure) and thin widget wiring.

Each concept keeps its figures in its own module -- ``viz.kv`` (notebook 01), ``viz.sched`` (02, 05),
``viz.chunks`` (05: chunked prefill step by step), ``viz.blocks`` (03, 04), ``viz.hash_chain`` (04: the
prefix cache's hash chain), ``viz.kernels`` (03, 06), ``viz.engine`` (07), ``viz.overview`` (07: the engine
as a whole), ``viz.kv_models`` (08: KV memory in today's models) -- and ``viz.widgets`` wires sliders to
them, ``viz.tables`` draws tables, and ``viz.i18n`` shows all of it (and the classroom's quizzes and
glossary) in the learner's language. Import from those modules; only the KV-size figures of notebook 01 are
re-exported here.
"""

import importlib

# The KV-size figures of notebook 01, loaded on first use (PEP 562): ``import paged_lab.viz.i18n`` (what
# the quizzes and the glossary need) must not load plotly.
_LAZY = {name: "paged_lab.viz.kv" for name in
         ("capacity_readout", "catalogue_table", "fig_kv_by_model", "fig_kv_vs_gpu", "fig_mha_gqa_mqa")}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'paged_lab.viz' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
