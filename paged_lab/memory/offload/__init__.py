"""A second tier for the KV cache: blocks kept in CPU memory and loaded back instead of recomputed (vLLM
V1's native CPU offloading, ``kv_offloading_size``). ``manager.py``: which block hashes the tier holds and
which leaves first (LRU); ``connector.py``: the Scheduler's side (what is stored when, how hits count);
``worker.py``: the copies between the paged pool and the tier's CPU tensors."""

from paged_lab.memory.offload.connector import OffloadingConnector, OffloadMeta, Transfer
from paged_lab.memory.offload.manager import CPUOffloadingManager, LookupResult

__all__ = ["CPUOffloadingManager", "LookupResult", "OffloadMeta", "OffloadingConnector", "Transfer"]
