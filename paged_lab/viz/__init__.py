"""Pure figure functions (state -> plotly Figure) and thin widget wiring.

Each concept keeps its figures in its own module -- ``viz.kv`` (notebook 01), ``viz.sched``
(02, 05), ``viz.blocks`` (03, 04), ``viz.kernels`` (03, 06), ``viz.engine`` (07) -- and
``viz.widgets`` wires sliders to them. Import from those modules; only the KV-size figures of
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
