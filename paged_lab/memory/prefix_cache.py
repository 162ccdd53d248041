"""Prefix-cache hashing: a full block is named by its content *and everything before it*.

    hash(block i) = sha256(hash(block i-1) || token ids of block i || extra_key)

Chaining the parent's hash means two blocks with the same tokens at different positions, or after
different prefixes, get different hashes -- the KV of a token depends on every token before it.
``extra_key`` salts the chain (e.g. a LoRA id or a tenant), so equal prompts under different keys
never share. Only full blocks are hashed: a partial block's content is still changing.

Why sha256 and not Python's ``hash``? A cache hit hands back somebody else's K and V, so two
different prefixes must never share a name. A 128-bit slice of sha256 makes that a non-event
for any realistic number of blocks (vLLM offers sha256 for the same reason), the hash is the
same in every process and on every machine, and a dict of ``bytes`` keys is invisible to
Python's garbage collector, which keeps a million-block cache cheap.
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Hashable, Sequence

BlockHash = bytes  # 16 bytes


def hash_block(parent_hash: BlockHash | None, tokens: Sequence[int],
               extra_key: Hashable | None = None) -> BlockHash:
    """The chained hash of one full block."""
    h = hashlib.sha256(parent_hash or b"root")
    h.update(array("q", tokens).tobytes())
    if extra_key is not None:
        h.update(repr(extra_key).encode())
    return h.digest()[:16]


def block_hashes(token_ids: Sequence[int], block_size: int, extra_key: Hashable | None = None,
                 parent: BlockHash | None = None) -> list[BlockHash]:
    """The chained hash of every *full* block of ``token_ids``, in order (``parent``: the hash of the block
    just before them, when they do not start the sequence)."""
    hashes: list[BlockHash] = []
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        parent = hash_block(parent, token_ids[start:start + block_size], extra_key)
        hashes.append(parent)
    return hashes


def find_cached_prefix(cached: dict[BlockHash, int], token_ids: Sequence[int], block_size: int,
                       extra_key: Hashable | None = None) -> tuple[list[int], list[BlockHash]]:
    """``(hits, hashes)``: the cached blocks that hold the longest prefix of ``token_ids``, and the
    hash of every full block. ``cached`` maps a block hash to the block holding that content.

    The last prompt token is always computed (its logits start decoding), so at most
    floor((len - 1) / block_size) blocks can be reused.
    """
    hashes = block_hashes(token_ids, block_size, extra_key)
    hits: list[int] = []
    for h in hashes[:(len(token_ids) - 1) // block_size]:
        if h not in cached:
            break
        hits.append(cached[h])
    return hits, hashes
