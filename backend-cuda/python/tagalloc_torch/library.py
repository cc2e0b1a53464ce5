"""The shared library through ctypes: where it is, and its calls (no PyTorch needed).

The library is ``libtagalloc_cuda_pluggable.so``, built from the crate
``backend-cuda/pluggable``. Its C signatures are in the crate's documentation
(``backend-cuda/pluggable/src/lib.rs``). :func:`find` takes the first of:

1. the ``library`` argument of the caller;
2. the environment variable ``TAGALLOC_CUDA_LIBRARY``;
3. the library installed beside this module (``pip install ./backend-cuda/python`` puts it
   there, named as an extension module of the Python that built it);
4. ``<repo>/target/release/`` of the checkout this module sits in
   (``cargo build --release -p tagalloc-cuda-pluggable``).

The first two are the user's explicit choices: a path named there that is not a file is
refused, naming it, rather than passed over for another library. The last two are searched;
the current directory never is.
"""

import ctypes
import importlib.machinery
import json
import os

from .errors import LibraryError, LibraryMissing, NoDriver

LIBRARY_STEM = "libtagalloc_cuda_pluggable"
LIBRARY_NAME = LIBRARY_STEM + ".so"
ENV_VAR = "TAGALLOC_CUDA_LIBRARY"
SIZE_MAX = ctypes.c_size_t(-1).value
# Where the package's own library lies: this module's directory.
PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
# The library's words when it could not load the CUDA driver (``DriverError::NoDriver`` in
# ``backend-cuda/src/error.rs``): such a failure is raised as :class:`NoDriver`.
NO_DRIVER = "no CUDA driver"
BUILD_HINT = (
    "install the package with `pip install ./backend-cuda/python`, or build the library with "
    f"`cargo build --release -p tagalloc-cuda-pluggable` and set {ENV_VAR} to its path"
)

# Every symbol enable() and the functions here need from a library they load; a library
# without one is refused when it is loaded. tagalloc_forget_stream is not among them: only
# Library.forget_stream needs it, and it says so when it is absent.
SYMBOLS = (
    "tagalloc_malloc",
    "tagalloc_free",
    "tagalloc_record_stream",
    "tagalloc_empty_cache",
    "tagalloc_begin_allocate_to_pool",
    "tagalloc_end_allocate_to_pool",
    "tagalloc_release_pool",
    "tagalloc_trim",
    "tagalloc_stats",
    "tagalloc_stats_size",
    "tagalloc_snapshot",
    "tagalloc_last_error",
)


def packaged_path():
    """The library installed beside this module, or None. The build backend (setuptools-rust)
    names it as it would an extension module of the building Python
    (``libtagalloc_cuda_pluggable.cpython-311-x86_64-linux-gnu.so``), so each of this Python's
    extension suffixes is tried, the plain ``.so`` among them."""
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = os.path.join(PACKAGE_DIR, LIBRARY_STEM + suffix)
        if os.path.isfile(path):
            return path
    return None


def default_path():
    """Where ``cargo build --release`` puts the library in this repository:
    ``<repo>/target/release/``, found from this file's place, never from the current directory."""
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.dirname(os.path.dirname(os.path.dirname(here)))
    return os.path.join(repo, "target", "release", LIBRARY_NAME)


def _not_a_file(path):
    """Why ``path`` (absolute) is not the library's file, in a few words."""
    if os.path.isdir(path):
        return "a directory, not the library's file"
    return "no such file"


def find(library=None):
    """The absolute path of the library, in the module's order: the ``library`` argument, the
    environment variable ``TAGALLOC_CUDA_LIBRARY``, the library packaged beside this module
    (:func:`packaged_path`), the checkout's release build (:func:`default_path`). Raises
    :class:`LibraryMissing` in one line: for an argument or a variable that names no file,
    naming it (an empty variable is refused too, not taken as unset); when the search finds
    nothing, naming the places it looked.

    A relative path given explicitly is taken from the current directory, as the caller asked;
    the search itself never looks there (ctypes would, for a bare file name)."""
    if library is not None:
        path = os.path.abspath(os.fspath(library))
        if not os.path.isfile(path):
            raise LibraryMissing(
                f"tagalloc: no library at {path} (from the library argument): {_not_a_file(path)}"
            )
        return path
    value = os.environ.get(ENV_VAR)
    if value is not None:
        if not value:
            raise LibraryMissing(
                f"tagalloc: the environment variable {ENV_VAR} is set but empty ({ENV_VAR}=); "
                "set it to the library's path, or unset it to use the packaged library"
            )
        path = os.path.abspath(value)
        if not os.path.isfile(path):
            named = value if path == value else f"{value} ({path})"
            raise LibraryMissing(
                f"tagalloc: the environment variable {ENV_VAR}={named} names "
                f"{_not_a_file(path)}; set it to the library's path, or unset it"
            )
        return path
    packaged = packaged_path()
    if packaged is not None:
        return packaged
    path = default_path()
    if not os.path.isfile(path):
        raise LibraryMissing(
            f"tagalloc: no library beside the module in {PACKAGE_DIR} nor at {path} "
            f"(the build's default path); {BUILD_HINT}"
        )
    return path


class Stats(ctypes.Structure):
    """``TagallocStats``: the fields of the C struct, in order (it only grows at its end)."""

    _fields_ = [
        ("status", ctypes.c_int32),
        ("in_use", ctypes.c_uint64),
        ("peak_in_use", ctypes.c_uint64),
        ("reserved", ctypes.c_uint64),
        ("peak_reserved", ctypes.c_uint64),
        ("pending", ctypes.c_uint64),
        ("allocations", ctypes.c_uint64),
        ("frees", ctypes.c_uint64),
        ("regions", ctypes.c_uint64),
        ("live_blocks", ctypes.c_uint64),
        ("pending_blocks", ctypes.c_uint64),
        ("exhaustion_retries", ctypes.c_uint64),
        ("pool_retries", ctypes.c_uint64),
        ("regions_obtained", ctypes.c_uint64),
        ("regions_given_back", ctypes.c_uint64),
        ("grown", ctypes.c_uint64),
        ("shrunk", ctypes.c_uint64),
        ("synchronizations", ctypes.c_uint64),
        ("events_recorded", ctypes.c_uint64),
        ("event_queries", ctypes.c_uint64),
        ("stream_waits", ctypes.c_uint64),
        ("stream_wait_ns", ctypes.c_uint64),
        ("host_sync_ns", ctypes.c_uint64),
        ("graph_pools", ctypes.c_uint64),
    ]


class MempoolId(ctypes.Structure):
    """PyTorch's ``MempoolId_t`` (``std::pair<CaptureId_t, CaptureId_t>``, two unsigned 64-bit
    integers), which the graph-pool hooks take by value. Only PyTorch calls those hooks; the
    type is declared so that their signatures are written down here too."""

    _fields_ = [("first", ctypes.c_uint64), ("second", ctypes.c_uint64)]


class Library:
    """The loaded library, its signatures declared. One per path: :func:`load` keeps them."""

    def __init__(self, path):
        self.path = path
        try:
            self.cdll = ctypes.CDLL(path)
        except OSError as e:
            raise LibraryMissing(f"tagalloc: cannot load {path}: {e}") from e
        missing = [s for s in SYMBOLS if not hasattr(self.cdll, s)]
        if missing:
            raise LibraryMissing(
                f"tagalloc: {path} lacks {', '.join(missing)}: not tagalloc's pluggable "
                "library, or an older build of it; rebuild it"
            )
        c = self.cdll
        c.tagalloc_trim.argtypes = [ctypes.c_int]
        c.tagalloc_trim.restype = ctypes.c_int
        c.tagalloc_empty_cache.argtypes = []
        c.tagalloc_empty_cache.restype = None
        c.tagalloc_stats.argtypes = [ctypes.c_int, ctypes.POINTER(Stats)]
        c.tagalloc_stats.restype = ctypes.c_int
        c.tagalloc_stats_size.argtypes = []
        c.tagalloc_stats_size.restype = ctypes.c_size_t
        c.tagalloc_snapshot.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]
        c.tagalloc_snapshot.restype = ctypes.c_size_t
        c.tagalloc_last_error.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        c.tagalloc_last_error.restype = ctypes.c_size_t
        c.tagalloc_begin_allocate_to_pool.argtypes = [ctypes.c_int, MempoolId, ctypes.c_void_p]
        c.tagalloc_begin_allocate_to_pool.restype = None
        c.tagalloc_end_allocate_to_pool.argtypes = [ctypes.c_int, MempoolId]
        c.tagalloc_end_allocate_to_pool.restype = None
        c.tagalloc_release_pool.argtypes = [ctypes.c_int, MempoolId]
        c.tagalloc_release_pool.restype = None
        if hasattr(c, "tagalloc_forget_stream"):
            c.tagalloc_forget_stream.argtypes = [ctypes.c_void_p]
            c.tagalloc_forget_stream.restype = ctypes.c_int
        if hasattr(c, "tagalloc_check_captures"):
            c.tagalloc_check_captures.argtypes = [ctypes.c_int]
            c.tagalloc_check_captures.restype = ctypes.c_int
        size = c.tagalloc_stats_size()
        if size != ctypes.sizeof(Stats):
            raise LibraryMissing(
                f"tagalloc: {path} has a TagallocStats of {size} bytes, this module "
                f"{ctypes.sizeof(Stats)}: the library and the module are of different versions"
            )

    def address(self, name):
        """The address of exported function ``name``, as PyTorch's hooks take it."""
        return ctypes.cast(getattr(self.cdll, name), ctypes.c_void_p).value

    def last_error(self):
        """The message of the library's last failure in this process ('' if none)."""
        n = self.cdll.tagalloc_last_error(None, 0)
        buf = ctypes.create_string_buffer(n + 1)
        self.cdll.tagalloc_last_error(buf, len(buf))
        return buf.value.decode("utf-8", "replace")

    def _fail(self, what):
        reason = self.last_error()
        # With no driver there is no GPU to use: NoDriver is a NoGpu as well as a LibraryError.
        kind = NoDriver if NO_DRIVER in reason else LibraryError
        raise kind(f"{what}: {reason}")

    def stats(self, device):
        """The pool's ``TagallocStats`` for ``device``; :class:`LibraryError` when there is no
        pool (no driver, no such device)."""
        out = Stats()
        if self.cdll.tagalloc_stats(device, ctypes.byref(out)) != 0:
            self._fail(f"tagalloc_stats(device {device})")
        return out

    def trim(self, device=-1):
        """Empties the cache of ``device`` (-1: of every device); :class:`LibraryError` if it
        could not."""
        if self.cdll.tagalloc_trim(device) != 0:
            self._fail("tagalloc_trim")

    def forget_stream(self, handle):
        """Makes the pool stop using the stream ``handle`` (a raw ``CUstream``, an int), as
        before the stream is destroyed; a stream the pool never saw is no error.
        :class:`LibraryMissing` when the library has no ``tagalloc_forget_stream`` (an older
        build), :class:`LibraryError` with the library's reason when it refused."""
        if not hasattr(self.cdll, "tagalloc_forget_stream"):
            raise LibraryMissing(
                f"tagalloc: {self.path} lacks tagalloc_forget_stream: an older build; rebuild it"
            )
        if self.cdll.tagalloc_forget_stream(handle) != 0:
            self._fail(f"tagalloc_forget_stream(stream {handle:#x})")

    def check_captures(self, on):
        """Makes every allocation ask which CUDA graph capture its stream is in, so that one on
        a capturing stream is refused (for a PyTorch without the graph-pool hooks).
        :class:`LibraryMissing` for an older build without ``tagalloc_check_captures``."""
        if not hasattr(self.cdll, "tagalloc_check_captures"):
            raise LibraryMissing(
                f"tagalloc: {self.path} lacks tagalloc_check_captures: an older build; rebuild it"
            )
        if self.cdll.tagalloc_check_captures(1 if on else 0) != 0:
            self._fail("tagalloc_check_captures")

    def snapshot_json(self, device):
        """The pool of ``device`` as the library's JSON text (see ``snapshot_json.rs``)."""
        size = 0
        # The pool can grow between the sizing call and the copy: ask again, with room to spare.
        for _ in range(8):
            buf = ctypes.create_string_buffer(size + 1) if size else None
            n = self.cdll.tagalloc_snapshot(device, buf, len(buf) if buf else 0)
            if n == SIZE_MAX:
                self._fail(f"tagalloc_snapshot(device {device})")
            if buf is not None and n < len(buf):
                return buf.value.decode("utf-8")
            size = n + n // 8 + 256
        raise LibraryError("tagalloc_snapshot: the pool kept changing size while being read")

    def snapshot(self, device):
        """:meth:`snapshot_json`, parsed."""
        return json.loads(self.snapshot_json(device))


_loaded = {}


def load(library=None):
    """The :class:`Library` at :func:`find`'s path, loaded once per path in this process (the
    same file PyTorch loads, so the same pools)."""
    path = find(library)
    if path not in _loaded:
        _loaded[path] = Library(path)
    return _loaded[path]
