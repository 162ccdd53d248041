"""A Llama-family GGUF file (the default model's) to a safetensors folder transformers loads, in one pass.

``AutoModelForCausalLM.from_pretrained(folder, gguf_file=...)`` gives the same weights, but slowly on a
small CPU: it parses the file three times with gguf-py's reader (which builds a numpy view of each of
the 49,152 vocabulary strings and 48,900 merges every time), rebuilds its tensor-name map once per
submodule, and then a second ``from_pretrained`` reads what was saved. Here the file's header is read
with transformers' own fast reader (the vocabulary is skipped, not decoded), the config comes from the
same GGUF -> transformers key mapping, each tensor is dequantized once by gguf-py (the same code, so
the same bits) and un-permuted by transformers' Llama tensor processor, and ``save_pretrained`` writes
the folder. tests/test_model_cache.py checks the result byte for byte against the slow path's.
"""

from __future__ import annotations

from pathlib import Path

# the GGUF metadata prefixes the config reads besides the architecture's own (``llama.*``)
_CONFIG_PREFIXES = ("general", "tokenizer")


def gguf_config(metadata: dict, tensor_names) -> dict:
    """The transformers config dict the GGUF metadata describes, as transformers' GGUF loader builds it:
    each ``<prefix>.<key>`` renamed by ``GGUF_CONFIG_MAPPING``, and tied embeddings when the file has no
    ``output.weight`` (the head is the embedding)."""
    from transformers.integrations.ggml import GGUF_CONFIG_MAPPING

    arch = metadata["general.architecture"]
    if arch not in ("llama", "mistral"):
        raise ValueError(f"gguf file: architecture {arch!r}; this converter reads Llama-family files only "
                         "(load others with transformers' from_pretrained(..., gguf_file=...))")
    config = {"tie_word_embeddings": "output.weight" not in set(tensor_names)}
    for key, value in metadata.items():
        prefix, _, rest = key.partition(".")
        if prefix == arch or prefix in _CONFIG_PREFIXES:
            name = GGUF_CONFIG_MAPPING[prefix].get(rest)
            if name not in (None, -1):
                config[name] = value
    return config


def _hf_names(model, arch: str, num_layers: int) -> dict[str, str]:
    """``{gguf tensor name: transformers parameter name}`` for ``model``'s parameters, from gguf-py's
    tensor-name map (built once)."""
    from gguf import MODEL_ARCH_NAMES, get_tensor_name_map

    arch_id = next(key for key, value in MODEL_ARCH_NAMES.items() if value == arch)
    name_map = get_tensor_name_map(arch_id, num_layers)
    names = {}
    for hf_name in model.state_dict():
        base, _, suffix = hf_name.rpartition(".")
        gguf_name = name_map.get_name(base)
        if gguf_name is not None:
            names[f"{gguf_name}.{suffix}"] = hf_name
    return names


def _tensor_bytes(blob, header, info):
    """The stored bytes of one tensor, shaped as gguf-py's ``dequantize`` takes them: whole blocks in
    the last dimension for a quantized type, the values themselves for F32/F16."""
    import numpy as np
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    start = header.data_start + info.offset
    raw = blob[start:start + info.nbytes]
    kind = GGMLQuantizationType(info.ggml_type)
    if kind in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
        values = raw.view(np.float32 if kind == GGMLQuantizationType.F32 else np.float16)
        return values.reshape(info.shape), kind
    block_values, block_bytes = GGML_QUANT_SIZES[kind]
    return raw.reshape(*info.shape[:-1], info.shape[-1] // block_values * block_bytes), kind


def dequantized_state_dict(gguf_path: Path, header, config: dict, names: dict[str, str]) -> dict:
    """``{transformers name: fp32 tensor}``: every tensor of the file dequantized once, Q and K rows
    un-permuted from llama.cpp's rotary layout (transformers' ``LlamaTensorProcessor``)."""
    import numpy as np
    import torch
    from gguf import dequantize
    from transformers.modeling_gguf_pytorch_utils import TENSOR_PROCESSORS, TensorProcessor

    processor = TENSOR_PROCESSORS.get(header.architecture, TensorProcessor)(config=config)
    blob = np.memmap(gguf_path, mode="r", dtype=np.uint8)
    tensors = {}
    for info in header.tensors:
        if info.name not in names:
            raise ValueError(f"{gguf_path}: tensor {info.name!r} has no parameter in the model")
        data, kind = _tensor_bytes(blob, header, info)
        weights = processor.process(weights=dequantize(data, kind), name=info.name).weights
        tensors[names[info.name]] = torch.from_numpy(np.array(weights, dtype=np.float32))
    return tensors


def convert_gguf(gguf_path: Path, folder: Path):
    """Write ``folder``: config, fp32 safetensors weights and tokenizer of the Llama-family GGUF file
    ``gguf_path``, as ``save_pretrained`` writes them. Returns ``(model, tokenizer)``, the fp32 model
    and tokenizer just written, so that the first load need not read them back."""
    from accelerate import init_empty_weights
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.integrations.gguf import GgufHeader, read_gguf_metadata
    from transformers.tokenization_utils_tokenizers import TokenizersBackend
    from transformers.utils import logging as hf_logging

    metadata, tensor_names = read_gguf_metadata(str(gguf_path))  # the vocabulary is skipped, not decoded
    header = GgufHeader.from_file(str(gguf_path))
    config_dict = gguf_config(metadata, tensor_names)
    config = AutoConfig.for_model(**config_dict)
    with init_empty_weights():  # parameters without storage (the file gives them); buffers (RoPE) made
        model = AutoModelForCausalLM.from_config(config)
    names = _hf_names(model, header.architecture, config.num_hidden_layers)
    model.load_state_dict(dequantized_state_dict(gguf_path, header, config_dict, names), strict=False,
                          assign=True)
    model.tie_weights()
    missing = [name for name, p in model.named_parameters() if p.is_meta]
    if missing:
        raise ValueError(f"{gguf_path}: no tensor in the file for {missing}")
    hf_logging.disable_progress_bar()  # its "Writing model shards" bar would nest inside load_model's
    try:
        model.save_pretrained(folder)
    finally:
        hf_logging.enable_progress_bar()
    tokenizer = TokenizersBackend.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    tokenizer.save_pretrained(folder)
    return model.eval(), tokenizer
