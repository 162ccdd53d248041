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


def tiny_llama_and_tokenizer():
    """A 2-layer random Llama (head_dim 16, 2 KV heads, vocabulary 1,024, seed 0) and a tokenizer that
    decodes to "" (the engine needs only ``decode`` and ``eos_token_id`` of it)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=1024, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256)

    class Tok:
        eos_token_id = None

        def decode(self, ids, skip_special_tokens=True):
            return ""

    return LlamaForCausalLM(cfg).eval(), Tok()


def tiny_torch_engine():
    """An LLM over :func:`tiny_llama_and_tokenizer`'s model: 64 blocks of 4 tokens, the torch backend, no
    prefix caching (the step-time tests)."""
    from paged_lab.engine import LLM

    model, tok = tiny_llama_and_tokenizer()
    return LLM(model, tokenizer=tok, block_size=4, num_kv_blocks=64, attention_backend="torch",
               enable_prefix_caching=False)
