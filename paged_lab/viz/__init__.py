"""Pure figure functions (state -> plotly Figure) and thin widget wiring.

Each concept keeps its figures in its own module -- ``viz.kv`` (notebook 01), ``viz.sched``
(02, 05), ``viz.chunks`` (05: chunked prefill step by step), ``viz.blocks`` (03, 04),
``viz.hash_chain`` (04: the prefix cache's hash chain), ``viz.kernels`` (03, 06), ``viz.engine`` (07),
``viz.overview`` (07: the engine as a whole) -- and ``viz.widgets`` wires sliders to them. Import from those modules; only the KV-size figures of
notebook 01 are re-exported here.
"""

from paged_lab.viz.kv import (
    capacity_readout,
    catalogue_table,
    fig_kv_by_model,
    fig_kv_vs_gpu,
    fig_mha_gqa_mqa,
)

__all__ = ["capacity_readout", "catalogue_table", "fig_kv_by_model", "fig_kv_vs_gpu", "fig_mha_gqa_mqa"]
