"""The pool's figures under the key names of ``torch.cuda.memory_stats()``.

Only the figures the pool really keeps get PyTorch's names; PyTorch's meaning of each (its
``memory_stats`` documentation and ``CUDACachingAllocator.cpp``) and what fills it here:

- ``reserved_bytes.all.current`` / ``.peak``: bytes held from the driver, now and at most.
- ``active_bytes.all.current`` / ``.peak``: bytes of blocks handed out, including blocks freed
  on one stream and waiting for the device to pass the free (PyTorch counts a block waiting for
  its events as active too). The peak is the pool's peak in use.
- ``allocated_bytes.all.current``: active bytes less the pending ones (freed by the program).
  There is no ``allocated_bytes.all.peak``: the pool keeps the peak of the active bytes only,
  and with several streams the two differ; use ``active_bytes.all.peak``.
- ``active.all.current``: blocks handed out, pending included; ``allocation.all.current``:
  those not pending.
- ``segment.all.current``: regions held from the driver (one per device with virtual-memory
  growth, which maps more of the same region as it grows).
- ``num_alloc_retries``: allocations that failed and were tried again, after giving back wholly
  free regions (the core pool's retries) or after waiting for pending frees (the device pool's
  exhaustion retries); the sum of both, so one request that did both counts twice.
- ``num_device_alloc`` / ``num_device_free``: regions obtained plus in-place growths (mappings),
  and regions given back plus free ends unmapped.

Sizes are of blocks as handed out (rounded to the pool's 256-byte granule). Nothing is split
into ``large_pool``/``small_pool`` (the pool has one heap), and the ``.allocated``/``.freed``
totals, ``requested_bytes``, ``inactive_split*`` and ``oversize_*`` are absent. The pool's own
figures follow under ``tagalloc.*`` names, among them what the pool did about streams:

- ``tagalloc.stream_waits``: device-side waits the pool queued (``cuStreamWaitEvent`` calls):
  an allocating stream made to wait on the device for another stream's frees instead of the
  host waiting. ``tagalloc.stream_wait_ns``: host nanoseconds spent issuing
  them (the cost to the host, not how long the device waited).
- ``tagalloc.synchronizations``: host synchronisations (running out of memory, emptying the
  cache); switching streams is not one. ``tagalloc.host_sync_ns``: host nanoseconds the pool
  spent blocked in them (``cuStreamSynchronize``, ``cuEventSynchronize``,
  ``cuCtxSynchronize``).
- ``tagalloc.graph_pools``: private pools of CUDA graphs alive on the device (allocations made
  on a stream being captured go to its graph's pool; see ``tagalloc_torch.graphs_supported``).
"""


def to_torch(s):
    """The dictionary for ``s``, a :class:`tagalloc_torch.library.Stats`."""
    return {
        "reserved_bytes.all.current": s.reserved,
        "reserved_bytes.all.peak": s.peak_reserved,
        "active_bytes.all.current": s.in_use,
        "active_bytes.all.peak": s.peak_in_use,
        "allocated_bytes.all.current": s.in_use - s.pending,
        "active.all.current": s.live_blocks,
        "allocation.all.current": s.live_blocks - s.pending_blocks,
        "segment.all.current": s.regions,
        "num_alloc_retries": s.exhaustion_retries + s.pool_retries,
        "num_device_alloc": s.regions_obtained + s.grown,
        "num_device_free": s.regions_given_back + s.shrunk,
        "tagalloc.pending_bytes": s.pending,
        "tagalloc.pending_blocks": s.pending_blocks,
        "tagalloc.allocations": s.allocations,
        "tagalloc.frees": s.frees,
        "tagalloc.exhaustion_retries": s.exhaustion_retries,
        "tagalloc.pool_retries": s.pool_retries,
        "tagalloc.regions_obtained": s.regions_obtained,
        "tagalloc.regions_given_back": s.regions_given_back,
        "tagalloc.grown": s.grown,
        "tagalloc.shrunk": s.shrunk,
        "tagalloc.synchronizations": s.synchronizations,
        "tagalloc.events_recorded": s.events_recorded,
        "tagalloc.event_queries": s.event_queries,
        "tagalloc.stream_waits": s.stream_waits,
        "tagalloc.stream_wait_ns": s.stream_wait_ns,
        "tagalloc.host_sync_ns": s.host_sync_ns,
        "tagalloc.graph_pools": s.graph_pools,
    }
