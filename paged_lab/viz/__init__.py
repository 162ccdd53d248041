"""Pure figure functions (state -> plotly Figure) and thin widget wiring.

Each concept keeps its figures in its own module; they are re-exported here.
"""

from paged_lab.viz.kv import (
    capacity_readout,
    catalogue_table,
    fig_kv_by_model,
    fig_kv_vs_gpu,
    fig_mha_gqa_mqa,
)

__all__ = ["capacity_readout", "catalogue_table", "fig_kv_by_model", "fig_kv_vs_gpu", "fig_mha_gqa_mqa"]
