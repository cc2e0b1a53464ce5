"""The library's snapshot JSON made into the dictionary ``torch.cuda.memory._snapshot()``
returns, so that PyTorch's memory visualiser (``torch.cuda._memory_viz``, and the page at
pytorch.org/memory_viz, which reads a pickle of it) draws a tagalloc pool.

PyTorch's dictionary is ``{"segments": [...], "device_traces": [[...] per device]}``; its
segments and blocks have the keys written by ``segmentInfoToDict`` in PyTorch's
``torch/csrc/cuda/memory_snapshot.cpp``, which the library writes already (see
``backend-cuda/pluggable/src/snapshot_json.rs``). Left here: ``segment_pool_id`` is a tuple
in PyTorch's pickles (JSON has only lists), and ``device_traces`` is empty for every device
(tagalloc records no history of events).
"""

import json

BLOCK_STATES = ("active_allocated", "active_pending_free", "inactive")


def to_torch(doc):
    """The snapshot dictionary for ``doc``, the library's JSON (text or already parsed).

    Raises ``ValueError`` when ``doc`` is not in the library's shape (a key missing, a block
    state PyTorch does not know, blocks that do not tile their segment)."""
    if isinstance(doc, (str, bytes)):
        doc = json.loads(doc)
    try:
        device = int(doc["device"])
        segments = [_segment(s) for s in doc["segments"]]
    except (KeyError, TypeError) as e:
        raise ValueError(f"not a tagalloc snapshot: {e!r} missing or malformed") from e
    return {"segments": segments, "device_traces": [[] for _ in range(device + 1)]}


def _segment(seg):
    seg = dict(seg)
    seg["segment_pool_id"] = tuple(seg["segment_pool_id"])
    at, blocks = seg["address"], []
    for b in seg["blocks"]:
        if b["state"] not in BLOCK_STATES:
            raise ValueError(f"block at {b['address']:#x}: unknown state {b['state']!r}")
        if b["address"] != at:
            raise ValueError(f"block at {b['address']:#x}: expected one at {at:#x}")
        at += b["size"]
        blocks.append(dict(b))
    if at - seg["address"] != seg["total_size"]:
        raise ValueError(f"segment at {seg['address']:#x}: blocks do not add up to its size")
    seg["blocks"] = blocks
    return seg
