"""tagalloc's CUDA device pool for PyTorch: every tensor of the process allocated from it.

::

    import tagalloc_torch
    tagalloc_torch.enable()          # first thing, before any CUDA tensor
    ...                              # the program, unchanged
    tagalloc_torch.memory_stats()    # {"reserved_bytes.all.peak": ..., ...}
    tagalloc_torch.dump_snapshot("snap.pickle")   # for pytorch.org/memory_viz
    tagalloc_torch.graphs_supported()             # whether CUDA graphs can be captured

The library is ``libtagalloc_cuda_pluggable.so``, built from the crate
``backend-cuda/pluggable`` and put inside the package by ``pip install ./backend-cuda/python``.
It is found from the ``library`` argument, else the environment variable
``TAGALLOC_CUDA_LIBRARY`` (both the user's explicit choices: a path there that is not a file is
refused, naming it), else the library packaged beside this module, else
``<repo>/target/release/`` of the checkout this module sits in (``cargo build --release -p
tagalloc-cuda-pluggable``); see :mod:`tagalloc_torch.library`. PyTorch loads it
through ``torch.cuda.memory.CUDAPluggableAllocator``; the functions here read the same pools
through ``ctypes``. The module imports without PyTorch, a GPU or the library; each function
raises a :class:`TagallocError` subclass saying which is missing.

PyTorch's own ``torch.cuda.memory_stats()``, ``max_memory_reserved()`` and the like raise under a
pluggable allocator (its ``getDeviceStats`` is unsupported in PyTorch's
``CUDAPluggableAllocator.cpp``): use :func:`memory_stats` and :func:`snapshot` here.

CUDA graphs: :func:`enable` also installs the library's graph-pool hooks where PyTorch's
pluggable allocator takes them (PyTorch 2.3 and later), so that what a graph's capture
allocates goes to a private pool of that graph; :func:`graphs_supported` says whether it did.
Without them the library refuses every allocation on a stream being captured (the allocation
fails, and the library records why) rather than hand out memory that other work could reuse
while the graph still writes it.

Streams: the pool remembers the streams it has allocated on. Before destroying a stream of
your own (a ``torch.cuda.ExternalStream`` over a stream you created), call
:func:`forget_stream`; PyTorch's own streams live as long as the process.
"""

import pickle

from . import library as _library
from . import torch_snapshot as _snapshot
from . import torch_stats as _stats
from .errors import (
    CudaAlreadyInitialized,
    LibraryError,
    LibraryMissing,
    NoDriver,
    NoGpu,
    TagallocError,
    TorchMissing,
)

__all__ = [
    "enable",
    "enabled",
    "graphs_supported",
    "forget_stream",
    "memory_stats",
    "empty_cache",
    "snapshot",
    "dump_snapshot",
    "TagallocError",
    "TorchMissing",
    "LibraryMissing",
    "CudaAlreadyInitialized",
    "NoGpu",
    "NoDriver",
    "LibraryError",
]

ENV_VAR = _library.ENV_VAR

# What enable() installed in this process: the library, PyTorch's allocator object over it,
# and whether the graph-pool hooks went in.
_enabled = None

# PyTorch's setters for the graph-pool hooks (PyTorch 2.3 and later), each with the library
# function it installs.
GRAPH_HOOKS = (
    ("set_begin_allocate_to_pool", "tagalloc_begin_allocate_to_pool"),
    ("set_end_allocate_to_pool_fn", "tagalloc_end_allocate_to_pool"),
    ("set_release_pool", "tagalloc_release_pool"),
)


def _torch():
    try:
        import torch
    except ImportError as e:
        raise TorchMissing(f"tagalloc: PyTorch is not installed ({e})") from e
    return torch


def enable(library=None):
    """Makes tagalloc PyTorch's CUDA allocator for this process; returns the path of the library.

    Installs ``torch.cuda.memory.CUDAPluggableAllocator(path, "tagalloc_malloc",
    "tagalloc_free")`` with the library's ``tagalloc_record_stream`` as its record-stream hook
    (``Tensor.record_stream``) and ``tagalloc_empty_cache`` as its reset hook
    (``torch.cuda.empty_cache()``), then ``torch.cuda.memory.change_current_allocator``.
    Where PyTorch's allocator has the graph-pool setters (``set_begin_allocate_to_pool``,
    ``set_end_allocate_to_pool_fn``, ``set_release_pool``), it installs the library's
    ``tagalloc_begin_allocate_to_pool``, ``tagalloc_end_allocate_to_pool`` and
    ``tagalloc_release_pool`` too; without all three it installs none of them and still
    enables (:func:`graphs_supported` is False then: every allocation asks whether its stream
    captures, and one that does is refused, so capturing a CUDA graph fails with that reason).

    Must come before CUDA is initialised (before the first CUDA tensor): PyTorch cannot swap an
    allocator in use. Raises :class:`TorchMissing`, :class:`CudaAlreadyInitialized`,
    :class:`NoGpu` or :class:`LibraryMissing`, each naming the cause, and changes nothing
    then. A second call with the same library does nothing; with another, it is refused."""
    global _enabled
    torch = _torch()
    path = _library.find(library)
    if _enabled is not None:
        if _enabled[0].path == path:
            return path
        raise TagallocError(
            f"tagalloc: already enabled with {_enabled[0].path}; "
            "one allocator per process (start a new process for another library)"
        )
    if torch.cuda.is_initialized():
        raise CudaAlreadyInitialized(
            "tagalloc: CUDA is already initialised in this process, so PyTorch's allocator "
            "can no longer be replaced; call tagalloc_torch.enable() before any CUDA tensor"
        )
    if not torch.cuda.is_available():
        raise NoGpu("tagalloc: PyTorch sees no CUDA device (torch.cuda.is_available() is False)")
    lib = _library.load(path)
    alloc = torch.cuda.memory.CUDAPluggableAllocator(path, "tagalloc_malloc", "tagalloc_free")
    hooks = alloc.allocator()
    for setter in ("set_record_stream_fn", "set_reset_fn"):
        if not hasattr(hooks, setter):
            raise TagallocError(
                f"tagalloc: this PyTorch ({torch.__version__}) has no {setter} on its pluggable "
                "allocator; without it record_stream or empty_cache would not reach the pool"
            )
    hooks.set_record_stream_fn(lib.address("tagalloc_record_stream"))
    hooks.set_reset_fn(lib.address("tagalloc_empty_cache"))
    graphs = _install_graph_hooks(hooks, lib)
    if not graphs:
        # No hooks to say when a capture is under way: every allocation asks, and one on a
        # capturing stream is refused rather than served from the shared pool.
        lib.check_captures(True)
    torch.cuda.memory.change_current_allocator(alloc)
    _enabled = (lib, alloc, graphs)
    return path


def _install_graph_hooks(hooks, lib):
    """Installs the graph-pool hooks when PyTorch's allocator has all three setters; returns
    whether it did. With only some of them a graph's pool could be opened and never closed or
    released, so then none is installed."""
    if not all(hasattr(hooks, setter) for setter, _ in GRAPH_HOOKS):
        return False
    for setter, symbol in GRAPH_HOOKS:
        getattr(hooks, setter)(lib.address(symbol))
    return True


def enabled():
    """The path of the library :func:`enable` installed, or None."""
    return _enabled[0].path if _enabled is not None else None


def graphs_supported():
    """Whether :func:`enable` installed the graph-pool hooks, so that CUDA graphs can be
    captured with tagalloc as the allocator. False before :func:`enable`, and when this PyTorch's
    pluggable allocator has no setters for them (before PyTorch 2.3): the library then refuses
    allocations on a stream being captured."""
    return _enabled is not None and _enabled[2]


def _lib(library):
    if library is None and _enabled is not None:
        return _enabled[0]
    return _library.load(library)


def _device(device):
    """``device`` as an ordinal: an int, a ``torch.device`` or ``"cuda:N"``; None is PyTorch's
    current device when PyTorch has initialised CUDA, else 0."""
    if device is None:
        try:
            import torch
        except ImportError:
            return 0
        return torch.cuda.current_device() if torch.cuda.is_initialized() else 0
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        if device.startswith("cuda:") and device[len("cuda:") :].isdigit():
            return int(device[len("cuda:") :])
    elif getattr(device, "type", None) == "cuda":
        # A torch.device; torch.device("cuda") has no index: the current device.
        return _device(None) if device.index is None else device.index
    raise ValueError(f"tagalloc: not a CUDA device ordinal: {device!r}")


def _stream_handle(stream):
    """The raw ``CUstream`` of ``stream``: a ``torch.cuda.Stream`` or ``ExternalStream`` (its
    ``cuda_stream``), or a handle given as an int. Checked without PyTorch."""
    handle = getattr(stream, "cuda_stream", stream)
    if isinstance(handle, bool) or not isinstance(handle, int):
        raise TypeError(
            "tagalloc: forget_stream takes a torch.cuda.Stream, a torch.cuda.ExternalStream or "
            f"a stream handle as an int, not {type(stream).__name__} {stream!r}"
        )
    if handle < 0:
        raise ValueError(f"tagalloc: not a stream handle: {handle}")
    return handle


def forget_stream(stream, library=None):
    """Makes the pool stop using ``stream`` (a ``torch.cuda.Stream``, a
    ``torch.cuda.ExternalStream``, or the raw handle as an int): call it before destroying a
    stream you created yourself, so that the pool never waits on or records into a dead
    handle. A stream the pool never saw is accepted (nothing to forget).

    Raises ``TypeError`` for anything else, checked before the library is loaded;
    :class:`LibraryMissing` without the library (or with a build lacking
    ``tagalloc_forget_stream``); :class:`LibraryError` with the library's reason when it
    refused."""
    handle = _stream_handle(stream)
    _lib(library).forget_stream(handle)


def memory_stats(device=None, library=None):
    """The pool's figures for ``device`` under ``torch.cuda.memory_stats()``'s key names where
    the pool has them (see :mod:`tagalloc_torch.torch_stats` for which, and what each holds).

    Needs the library, not PyTorch. Raises :class:`LibraryMissing`, :class:`NoDriver` (a
    :class:`NoGpu` and a :class:`LibraryError`) on a machine without a CUDA driver, or
    :class:`LibraryError` with the library's reason (no such device, a driver failure)."""
    return _stats.to_torch(_lib(library).stats(_device(device)))


def empty_cache(device=None, library=None):
    """Gives back to the driver what the pool of ``device`` holds and does not use (every
    device's for None), as ``torch.cuda.empty_cache()`` does once :func:`enable` is in place.
    Raises :class:`LibraryError` when it could not (no driver, no such device)."""
    _lib(library).trim(-1 if device is None else _device(device))


def snapshot(device=None, library=None):
    """The pool of ``device`` as ``torch.cuda.memory._snapshot()`` gives PyTorch's:
    ``{"segments": [...], "device_traces": [[], ...]}``, one segment per region the pool holds,
    its blocks ``active_allocated``, ``active_pending_free`` or ``inactive`` (see
    :mod:`tagalloc_torch.torch_snapshot`). Raises :class:`LibraryError` with the library's
    reason."""
    return _snapshot.to_torch(_lib(library).snapshot_json(_device(device)))


def dump_snapshot(filename="dump_snapshot.pickle", device=None, library=None):
    """Writes :func:`snapshot` as a pickle, as ``torch.cuda.memory._dump_snapshot`` does, for
    pytorch.org/memory_viz or ``torch.cuda._memory_viz.segsum(pickle.load(f))``."""
    s = snapshot(device, library)
    with open(filename, "wb") as f:
        pickle.dump(s, f)
    return filename
