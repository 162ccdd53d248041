"""The lab's instruments: ``python -m paged_lab`` (``cli``), the engine benchmarks (``bench``, and
``bench_vllm`` against vLLM's CPU build), and what changes when a notebook runs on a GPU (``gpu``)."""
