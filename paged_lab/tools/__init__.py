"""The lab's instruments: ``python -m paged_lab`` (``cli``), the engine benchmarks (``bench``, and
``bench_vllm`` against vLLM's CPU build), the kernel benchmark (``kernel_bench``: paged decode against
SDPA on a contiguous cache, on a GPU), the Triton kernels compiled for GPU targets without a GPU
(``aot``), and what changes when a notebook runs on a GPU (``gpu``)."""
