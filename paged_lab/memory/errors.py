"""The memory manager's exceptions. Each message names the argument and the limit it broke.

Every BlockManager operation is all-or-nothing: when one of these is raised, the state is exactly
what it was before the call.
"""

from __future__ import annotations


class BlockManagerError(Exception):
    """Base class of every error raised by ``paged_lab.memory``."""


class InvalidBlockConfig(BlockManagerError, ValueError):
    """``num_blocks`` or ``block_size`` is not a positive integer."""


class InvalidArgument(BlockManagerError, ValueError):
    """An argument of an operation is out of range (an empty prompt, a negative token count)."""


class InvalidTokenId(InvalidArgument, TypeError):
    """A token id is not an integer (it would only fail later, when its block is hashed)."""


class OutOfBlocks(BlockManagerError, RuntimeError):
    """An operation needs more physical blocks than the free queue holds."""

    def __init__(self, needed: int, free: int, what: str = "the request"):
        self.needed, self.free = needed, free
        super().__init__(
            f"{what} needs {needed} free block(s) but only {free} are free "
            f"(num_free_blocks={free}); free or preempt a sequence first"
        )


class UnknownSequence(BlockManagerError, LookupError):
    """The ``seq_id`` was never allocated, or has already been freed."""

    def __init__(self, seq_id):
        self.seq_id = seq_id
        super().__init__(f"seq_id={seq_id!r} is not allocated (never allocated, or already freed)")

    def __str__(self) -> str:  # LookupError would otherwise quote the message like a KeyError
        return self.args[0]


class DuplicateSequence(BlockManagerError, ValueError):
    """The ``seq_id`` already holds a block table."""

    def __init__(self, seq_id):
        self.seq_id = seq_id
        super().__init__(f"seq_id={seq_id!r} is already allocated; free it first or pick a new id")
