"""Build once, ahead of a learner's first run, what that run would otherwise build: the default model's
fp32 copy (converted from the GGUF in the wheel) and the C kernels, into ``PAGED_LAB_CACHE``.

    python -m paged_lab.tools.prebuild

Binder's ``binder/postBuild`` runs it, so that a Binder container starts warm: notebook 01's model cell
then reads the cached copy instead of converting the GGUF.
"""

from __future__ import annotations


def prebuild(progress: bool = True) -> dict[str, str]:
    """Build the default model's cached copy and each C library; ``{what: "ready" or why not}`` (a CPU
    without AVX-512 gets no C kernels, and the notebooks run without them)."""
    from paged_lab._cache import cache_root
    from paged_lab.kernels.cpu import attention, gemm, layer_ops
    from paged_lab.models import DEFAULT_MODEL, load_model

    load_model(DEFAULT_MODEL, device="cpu", progress=progress)
    done = {f"{DEFAULT_MODEL} in {cache_root()}": "ready"}
    for module in (attention, gemm, layer_ops):
        library = module.LIBRARY
        ready = library.lib() is not None
        done[f"C kernels {library.source.name}"] = "ready" if ready else f"not built: {library.why}"
    return done


if __name__ == "__main__":
    for what, state in prebuild().items():
        print(f"{what}: {state}")
