"""What tagalloc_torch raises: one class per missing piece, so that a caller can tell them apart."""


class TagallocError(RuntimeError):
    """Base class: something tagalloc_torch needs is missing, or the library refused."""


class TorchMissing(TagallocError):
    """PyTorch cannot be imported."""


class LibraryMissing(TagallocError):
    """The shared library was not found, or is not tagalloc's (of this version)."""


class CudaAlreadyInitialized(TagallocError):
    """CUDA was initialised before enable(): PyTorch's allocator can no longer be swapped."""


class NoGpu(TagallocError):
    """No CUDA device to use: PyTorch sees none (:func:`enable`), or the library found no CUDA
    driver (:class:`NoDriver`)."""


class LibraryError(TagallocError):
    """The library answered with an error (no CUDA driver, no such device, a driver failure):
    its message, from tagalloc_last_error, is the exception's."""


class NoDriver(LibraryError, NoGpu):
    """The library could not load the CUDA driver (``libcuda.so``): a :class:`LibraryError`, as
    every refusal of the library is, and a :class:`NoGpu`, so that one ``except NoGpu`` covers
    a machine without a GPU whether PyTorch or the library found out."""
