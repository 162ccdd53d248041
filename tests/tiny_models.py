"""Small random Llamas the engine tests share (transformers' own LlamaForCausalLM, seeded)."""

from __future__ import annotations


def head_dim_64_llama():
    """A 2-layer random Llama with head_dim 64 (what every attention backend here takes, Triton's
    included): 2 query heads over 1 KV head, vocabulary 96, seed 0."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=96, hidden_size=128, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=64, tie_word_embeddings=False,
                      max_position_embeddings=256)
    return LlamaForCausalLM(cfg).eval()
