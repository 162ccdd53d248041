"""The CPU fast path, a room of its own: what makes the engine fast on a CPU, and nothing the lesson needs.

- ``attention.py``: paged attention in C (``csrc/paged_attention.c``), the dispatch's ``"cpu"`` backend;
- ``fast_path.py``: how the rest plugs into the model's forward (``engine.llama.Ops``): :func:`~paged_lab.
  kernels.cpu.fast_path.install` registers the C ops and, if asked, the packed projections;
- ``layer_ops.py``: RMSNorm, RoPE, SiLU(gate) * up in C (``csrc/layer_ops.c``);
- ``linear.py`` and ``gemm.py``: the projections from a packed copy of the weights (oneDNN, or the C panel
  matmul ``csrc/panel_gemm.c`` in 2 MB pages);
- ``build.py``: builds each C file on first use into this user's private cache, and loads it.

The readable versions stay where the notebooks read them: ``kernels/reference.py`` for attention,
``engine/llama.py`` for the model. Everything here computes the same numbers (to summation order).
"""
