"""Shared fixtures. The real model is loaded once per test session (a few seconds from the cache)."""

import pytest

import paged_lab.kernels  # noqa: F401  (sets TRITON_INTERPRET=1 on CPU-only machines before anything imports triton)


@pytest.fixture(scope="session")
def smollm2():
    """(model, tokenizer, spec) of the real default model, fp32 on CPU."""
    from paged_lab.models import load_model

    return load_model(dtype="float32", device="cpu", progress=False)
