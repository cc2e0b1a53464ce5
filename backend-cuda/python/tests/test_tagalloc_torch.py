"""tagalloc_torch without PyTorch and without a GPU: the import, enable()'s refusals and its
wiring, graph-pool hooks included (against a stand-in for torch), forget_stream's argument,
the ctypes layer against the built library (which, with no CUDA driver, must report that as an
exception), and the conversions to PyTorch's shapes.

Run from the repository root after ``cargo build --release -p tagalloc-cuda-pluggable``:
``python3 -m unittest discover -s backend-cuda/python -v``. Without the built library the tests
that need it are skipped, or fail under ``CI=true``. ``bash .ci/python-package`` runs them
against the installed wheel instead, the library inside it. What holds in a checkout only is in
``test_checkout.py``; what holds for the installed wheel only, in ``installed_wheel.py``, which
``bash .ci/python-package`` runs by name (its name keeps it out of a checkout's discovery).
"""

import ctypes
import importlib.machinery
import json
import os
import pickle
import sys
import tempfile
import types
import unittest
from unittest import mock

import tagalloc_torch
from tagalloc_torch import library, torch_snapshot, torch_stats

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "fixtures", "snapshot_fake.json")
# Read once: the tests clear the variable to test the search.
BUILT = os.environ.get(library.ENV_VAR)
# A stream handle no pool has seen (never dereferenced: forgetting an unknown stream is a no-op).
UNSEEN_STREAM = 0x7A6A0000


def built_library():
    """The built library's path (the variable's, else the packaged one, else the checkout's
    release build), or a skip (a failure under CI=true) saying it is not built."""
    path = BUILT or library.packaged_path() or library.default_path()
    if not os.path.isfile(path):
        reason = f"{path} is not built (cargo build --release -p tagalloc-cuda-pluggable)"
        if os.environ.get("CI") == "true":
            raise AssertionError(reason)
        raise unittest.SkipTest(reason)
    return os.path.abspath(path)


def driver_present():
    """Whether this machine has a CUDA driver (then the no-driver tests do not apply)."""
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


GRAPH_SETTERS = ("set_begin_allocate_to_pool", "set_end_allocate_to_pool_fn", "set_release_pool")


class FakeTorch(types.ModuleType):
    """What enable() touches of torch, recording the calls. ``graph_setters`` are the graph-pool
    setters its pluggable allocator has (all three, as PyTorch 2.3 and later, by default)."""

    def __init__(self, initialized=False, available=True, graph_setters=GRAPH_SETTERS):
        super().__init__("torch")
        self.__version__ = "0.0-fake"
        self.calls = []
        calls = self.calls

        class Hooks:
            def set_record_stream_fn(self, addr):
                calls.append(("set_record_stream_fn", addr))

            def set_reset_fn(self, addr):
                calls.append(("set_reset_fn", addr))

        for name in graph_setters:
            setattr(Hooks, name, lambda self, addr, name=name: calls.append((name, addr)))

        class CUDAPluggableAllocator:
            def __init__(self, path, alloc_fn_name, free_fn_name):
                calls.append(("CUDAPluggableAllocator", path, alloc_fn_name, free_fn_name))
                self.hooks = Hooks()

            def allocator(self):
                return self.hooks

        def change_current_allocator(alloc):
            calls.append(("change_current_allocator", alloc))

        self.cuda = types.SimpleNamespace(
            is_initialized=lambda: initialized,
            is_available=lambda: available,
            current_device=lambda: 0,
            memory=types.SimpleNamespace(
                CUDAPluggableAllocator=CUDAPluggableAllocator,
                change_current_allocator=change_current_allocator,
            ),
        )


class Clean(unittest.TestCase):
    """Each test starts with nothing enabled and no TAGALLOC_CUDA_LIBRARY unless it sets one."""

    def setUp(self):
        self.env = mock.patch.dict(os.environ)
        self.env.start()
        os.environ.pop(library.ENV_VAR, None)
        self.addCleanup(self.env.stop)
        tagalloc_torch._enabled = None
        self.addCleanup(setattr, tagalloc_torch, "_enabled", None)


class TestImportAndFind(Clean):
    def test_imports_without_torch(self):
        ours = {n: m for n, m in sys.modules.items() if n.split(".")[0] == "tagalloc_torch"}
        try:
            with mock.patch.dict(sys.modules, {"torch": None}):
                for name in ours:
                    del sys.modules[name]
                import tagalloc_torch as fresh

                self.assertIsNot(fresh, tagalloc_torch, "imported anew")
                self.assertTrue(callable(fresh.enable))
        finally:
            sys.modules.update(ours)

    def test_enable_without_torch_says_so(self):
        with mock.patch.dict(sys.modules, {"torch": None}):
            with self.assertRaises(tagalloc_torch.TorchMissing) as e:
                tagalloc_torch.enable(library=built_library())
        self.assertIn("PyTorch is not installed", str(e.exception))

    def test_argument_then_environment_then_default(self):
        with tempfile.TemporaryDirectory() as d:
            a, b = os.path.join(d, "a.so"), os.path.join(d, "b.so")
            for p in (a, b):
                open(p, "wb").close()
            os.environ[library.ENV_VAR] = b
            self.assertEqual(library.find(a), a)
            self.assertEqual(library.find(), b)
            del os.environ[library.ENV_VAR]
            # Nothing packaged beside the module (the packaged library's turn is tested below).
            with mock.patch.object(library, "PACKAGE_DIR", d):
                if not os.path.isfile(library.default_path()):
                    with self.assertRaises(tagalloc_torch.LibraryMissing) as e:
                        library.find()
                    self.assertIn("the build's default path", str(e.exception))
                else:
                    self.assertEqual(library.find(), library.default_path())

    def test_never_the_current_directory_by_accident(self):
        cwd = os.getcwd()
        with tempfile.TemporaryDirectory() as d, tempfile.TemporaryDirectory() as empty:
            open(os.path.join(d, library.LIBRARY_NAME), "wb").close()
            os.chdir(d)
            # Nothing packaged beside the module: the search goes on to the checkout's build.
            packaged = mock.patch.object(library, "PACKAGE_DIR", empty)
            packaged.start()
            self.addCleanup(packaged.stop)
            try:
                try:
                    found = library.find()
                except tagalloc_torch.LibraryMissing as e:
                    self.assertNotIn(d, str(e))
                else:
                    self.assertEqual(found, library.default_path())
                    self.assertFalse(found.startswith(d))
            finally:
                os.chdir(cwd)

    def test_the_packaged_library_comes_after_the_explicit_choices(self):
        with tempfile.TemporaryDirectory() as pkg, tempfile.TemporaryDirectory() as d:
            # Named as setuptools-rust names it: an extension module of this Python.
            suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
            packaged = os.path.join(pkg, library.LIBRARY_STEM + suffix)
            a, b = os.path.join(d, "a.so"), os.path.join(d, "b.so")
            for p in (packaged, a, b):
                open(p, "wb").close()
            with mock.patch.object(library, "PACKAGE_DIR", pkg):
                self.assertEqual(library.packaged_path(), packaged)
                # Before the checkout's build, whether or not there is one.
                self.assertEqual(library.find(), packaged)
                os.environ[library.ENV_VAR] = b
                self.assertEqual(library.find(), b)
                self.assertEqual(library.find(a), a)

    def test_a_plain_so_beside_the_module_is_packaged_too(self):
        with tempfile.TemporaryDirectory() as pkg:
            plain = os.path.join(pkg, library.LIBRARY_NAME)
            open(plain, "wb").close()
            with mock.patch.object(library, "PACKAGE_DIR", pkg):
                self.assertEqual(library.find(), plain)

    def test_nothing_found_names_where_it_looked_and_how_to_install(self):
        with tempfile.TemporaryDirectory() as pkg:
            missing = os.path.join(pkg, "target", "release", library.LIBRARY_NAME)
            with mock.patch.object(library, "PACKAGE_DIR", pkg), mock.patch.object(
                library, "default_path", return_value=missing
            ):
                with self.assertRaises(tagalloc_torch.LibraryMissing) as e:
                    library.find()
        message = str(e.exception)
        self.assertIn(pkg, message)
        self.assertIn(missing, message)
        self.assertIn("pip install ./backend-cuda/python", message)
        self.assertNotIn("\n", message)

    def test_an_empty_variable_is_refused_not_taken_as_unset(self):
        os.environ[library.ENV_VAR] = ""
        with self.assertRaises(tagalloc_torch.LibraryMissing) as e:
            library.find()
        self.assertIn(f"{library.ENV_VAR} is set but empty", str(e.exception))
        self.assertNotIn("\n", str(e.exception))

    def test_a_variable_naming_no_file_is_refused_naming_it(self):
        with tempfile.TemporaryDirectory() as d:
            os.environ[library.ENV_VAR] = d
            with self.assertRaises(tagalloc_torch.LibraryMissing) as e:
                library.find()
            self.assertIn(f"{library.ENV_VAR}={d} names a directory", str(e.exception))
            missing = os.path.join(d, "missing.so")
            os.environ[library.ENV_VAR] = missing
            with self.assertRaises(tagalloc_torch.LibraryMissing) as e:
                library.find()
            self.assertIn(f"{library.ENV_VAR}={missing} names no such file", str(e.exception))
            # Even with a library packaged beside the module: the variable is the user's choice.
            open(os.path.join(d, library.LIBRARY_NAME), "wb").close()
            with mock.patch.object(library, "PACKAGE_DIR", d):
                with self.assertRaises(tagalloc_torch.LibraryMissing):
                    library.find()

    def test_an_argument_naming_a_directory_is_refused_naming_it(self):
        with tempfile.TemporaryDirectory() as d:
            with self.assertRaises(tagalloc_torch.LibraryMissing) as e:
                library.find(d)
        message = str(e.exception)
        self.assertIn(f"no library at {d} (from the library argument): a directory", message)

    def test_a_wrong_path_is_refused_with_the_path_and_its_origin(self):
        fake = FakeTorch()
        with mock.patch.dict(sys.modules, {"torch": fake}):
            with self.assertRaises(tagalloc_torch.LibraryMissing) as e:
                tagalloc_torch.enable(library="/nonexistent/libtagalloc_cuda_pluggable.so")
            self.assertIn("/nonexistent/libtagalloc_cuda_pluggable.so", str(e.exception))
            self.assertIn("the library argument", str(e.exception))
            os.environ[library.ENV_VAR] = "/nowhere/lib.so"
            with self.assertRaises(tagalloc_torch.LibraryMissing) as e:
                tagalloc_torch.enable()
            self.assertIn("TAGALLOC_CUDA_LIBRARY", str(e.exception))
        self.assertEqual(fake.calls, [], "nothing installed")

    def test_no_graphs_before_enable_nor_after_a_refused_one(self):
        self.assertIs(tagalloc_torch.graphs_supported(), False)
        fake = FakeTorch()
        with mock.patch.dict(sys.modules, {"torch": fake}):
            with self.assertRaises(tagalloc_torch.LibraryMissing):
                tagalloc_torch.enable(library="/nonexistent/libtagalloc_cuda_pluggable.so")
        self.assertIs(tagalloc_torch.graphs_supported(), False)
        self.assertEqual(fake.calls, [])

    def test_a_file_that_is_not_the_library_is_refused(self):
        with tempfile.NamedTemporaryFile(suffix=".so") as f:
            f.write(b"not an ELF file")
            f.flush()
            with self.assertRaises(tagalloc_torch.LibraryMissing) as e:
                library.Library(f.name)
            self.assertIn("cannot load", str(e.exception))


class TestEnable(Clean):
    def test_refuses_once_cuda_is_initialised(self):
        fake = FakeTorch(initialized=True)
        with mock.patch.dict(sys.modules, {"torch": fake}):
            with self.assertRaises(tagalloc_torch.CudaAlreadyInitialized) as e:
                tagalloc_torch.enable(library=built_library())
        self.assertIn("already initialised", str(e.exception))
        self.assertEqual(fake.calls, [], "nothing installed")
        self.assertIsNone(tagalloc_torch.enabled())
        self.assertFalse(tagalloc_torch.graphs_supported())

    def test_refuses_without_a_gpu(self):
        fake = FakeTorch(available=False)
        with mock.patch.dict(sys.modules, {"torch": fake}):
            with self.assertRaises(tagalloc_torch.NoGpu) as e:
                tagalloc_torch.enable(library=built_library())
        self.assertIn("no CUDA device", str(e.exception))
        self.assertEqual(fake.calls, [])

    def test_installs_the_allocator_and_its_hooks(self):
        path = built_library()
        fake = FakeTorch()
        with mock.patch.dict(sys.modules, {"torch": fake}):
            self.assertFalse(tagalloc_torch.graphs_supported(), "before enable()")
            self.assertEqual(tagalloc_torch.enable(library=path), path)
            lib = ctypes.CDLL(path)

            def addr(name):
                return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value

            self.assertEqual(
                fake.calls[0], ("CUDAPluggableAllocator", path, "tagalloc_malloc", "tagalloc_free")
            )
            record = ("set_record_stream_fn", addr("tagalloc_record_stream"))
            self.assertEqual(fake.calls[1], record)
            self.assertEqual(fake.calls[2], ("set_reset_fn", addr("tagalloc_empty_cache")))
            self.assertEqual(
                fake.calls[3:6],
                [
                    ("set_begin_allocate_to_pool", addr("tagalloc_begin_allocate_to_pool")),
                    ("set_end_allocate_to_pool_fn", addr("tagalloc_end_allocate_to_pool")),
                    ("set_release_pool", addr("tagalloc_release_pool")),
                ],
            )
            self.assertEqual(fake.calls[6][0], "change_current_allocator")
            self.assertEqual(len(fake.calls), 7)
            self.assertEqual(tagalloc_torch.enabled(), path)
            self.assertTrue(tagalloc_torch.graphs_supported())
            # Again with the same library: nothing more; with another: refused.
            self.assertEqual(tagalloc_torch.enable(library=path), path)
            self.assertEqual(len(fake.calls), 7)
            with tempfile.NamedTemporaryFile(suffix=".so") as other:
                with self.assertRaises(tagalloc_torch.TagallocError) as e:
                    tagalloc_torch.enable(library=other.name)
                self.assertIn("already enabled", str(e.exception))

    def test_enables_without_graphs_on_a_pytorch_lacking_a_graph_pool_setter(self):
        path = built_library()
        # Before PyTorch 2.3: none of the setters; and a PyTorch with only some of them.
        for setters in ((), GRAPH_SETTERS[:1], GRAPH_SETTERS[1:]):
            with self.subTest(setters=setters):
                tagalloc_torch._enabled = None
                fake = FakeTorch(graph_setters=setters)
                with mock.patch.dict(sys.modules, {"torch": fake}):
                    self.assertEqual(tagalloc_torch.enable(library=path), path)
                names = [c[0] for c in fake.calls]
                self.assertEqual(
                    names,
                    [
                        "CUDAPluggableAllocator",
                        "set_record_stream_fn",
                        "set_reset_fn",
                        "change_current_allocator",
                    ],
                    "no graph-pool hook installed unless all three can be",
                )
                self.assertEqual(tagalloc_torch.enabled(), path)
                self.assertFalse(tagalloc_torch.graphs_supported())

    def test_refuses_a_pytorch_without_the_hooks(self):
        fake = FakeTorch()
        alloc_class = fake.cuda.memory.CUDAPluggableAllocator

        class Bare(alloc_class):
            def allocator(self):
                return object()

        fake.cuda.memory.CUDAPluggableAllocator = Bare
        with mock.patch.dict(sys.modules, {"torch": fake}):
            with self.assertRaises(tagalloc_torch.TagallocError) as e:
                tagalloc_torch.enable(library=built_library())
        self.assertIn("set_record_stream_fn", str(e.exception))
        self.assertNotIn("change_current_allocator", [c[0] for c in fake.calls])


class TestForgetStream(Clean):
    """forget_stream's argument, checked before any library is loaded, and what reaches it."""

    def test_refuses_what_is_not_a_stream_before_loading_anything(self):
        nowhere = "/nonexistent/libtagalloc_cuda_pluggable.so"
        for bad in ("0x1234", 1.5, None, True, object(), types.SimpleNamespace(cuda_stream="7")):
            with self.subTest(bad=bad):
                with self.assertRaises(TypeError) as e:
                    tagalloc_torch.forget_stream(bad, library=nowhere)
                self.assertIn("forget_stream takes a torch.cuda.Stream", str(e.exception))
                self.assertIn(type(bad).__name__, str(e.exception))
        with self.assertRaises(ValueError) as e:
            tagalloc_torch.forget_stream(-1, library=nowhere)
        self.assertIn("not a stream handle", str(e.exception))

    def test_passes_the_streams_handle_to_the_library(self):
        seen = []
        fake_lib = types.SimpleNamespace(forget_stream=seen.append)
        with mock.patch.object(tagalloc_torch, "_lib", return_value=fake_lib) as lib:
            tagalloc_torch.forget_stream(types.SimpleNamespace(cuda_stream=0x5A5A00))
            tagalloc_torch.forget_stream(0x7E00, library="/some/lib.so")
        self.assertEqual(seen, [0x5A5A00, 0x7E00])
        self.assertEqual([c.args for c in lib.call_args_list], [(None,), ("/some/lib.so",)])

    def test_without_the_library_says_so(self):
        with self.assertRaises(tagalloc_torch.LibraryMissing) as e:
            tagalloc_torch.forget_stream(0x7E00, library="/nonexistent/lib.so")
        self.assertIn("/nonexistent/lib.so", str(e.exception))


class TestLibrarySymbols(Clean):
    """The built library, with or without a CUDA driver: the functions added for graphs and
    streams are there, declared as their C signatures say."""

    def setUp(self):
        super().setUp()
        self.lib = library.load(built_library())

    def test_the_graph_pool_hooks_are_exported_and_declared(self):
        for setter, symbol in tagalloc_torch.GRAPH_HOOKS:
            self.assertIn(symbol, library.SYMBOLS)
            self.assertTrue(self.lib.address(symbol), symbol)
        c = self.lib.cdll
        pool = library.MempoolId
        self.assertEqual(
            c.tagalloc_begin_allocate_to_pool.argtypes, [ctypes.c_int, pool, ctypes.c_void_p]
        )
        self.assertEqual(c.tagalloc_end_allocate_to_pool.argtypes, [ctypes.c_int, pool])
        self.assertEqual(c.tagalloc_release_pool.argtypes, [ctypes.c_int, pool])
        self.assertEqual(ctypes.sizeof(pool), 16, "std::pair<CaptureId_t, CaptureId_t>")

    def test_forget_stream_is_exported_and_declared(self):
        f = self.lib.cdll.tagalloc_forget_stream
        self.assertEqual(f.argtypes, [ctypes.c_void_p])
        self.assertIs(f.restype, ctypes.c_int)


class TestLibraryWithoutDriver(Clean):
    """The real library on a machine with no CUDA driver: every call is a clear exception."""

    def setUp(self):
        super().setUp()
        if driver_present():
            self.skipTest("this machine has a CUDA driver; these tests are for one without")
        self.path = built_library()

    def test_loads_and_agrees_on_the_stats_layout(self):
        lib = library.load(self.path)
        self.assertEqual(lib.cdll.tagalloc_stats_size(), ctypes.sizeof(library.Stats))

    def test_memory_stats_reports_no_driver(self):
        with self.assertRaises(tagalloc_torch.LibraryError) as e:
            tagalloc_torch.memory_stats(library=self.path)
        self.assertIn("no CUDA driver", str(e.exception))

    def test_no_driver_is_a_no_gpu_error(self):
        for call in (tagalloc_torch.memory_stats, tagalloc_torch.snapshot):
            with self.assertRaises(tagalloc_torch.NoGpu) as e:
                call(library=self.path)
            self.assertIsInstance(e.exception, tagalloc_torch.NoDriver)
            self.assertIsInstance(e.exception, tagalloc_torch.LibraryError)
            self.assertIn("no CUDA driver", str(e.exception))

    def test_snapshot_reports_no_driver_and_writes_no_file(self):
        with self.assertRaises(tagalloc_torch.LibraryError) as e:
            tagalloc_torch.snapshot(library=self.path)
        self.assertIn("no CUDA driver", str(e.exception))
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "snap.pickle")
            with self.assertRaises(tagalloc_torch.LibraryError):
                tagalloc_torch.dump_snapshot(out, library=self.path)
            self.assertFalse(os.path.exists(out))

    def test_empty_cache_reports_no_driver(self):
        with self.assertRaises(tagalloc_torch.LibraryError) as e:
            tagalloc_torch.empty_cache(library=self.path)
        self.assertIn("no CUDA driver", str(e.exception))
        with self.assertRaises(tagalloc_torch.LibraryError):
            tagalloc_torch.empty_cache(device=0, library=self.path)

    def test_the_library_from_the_environment(self):
        os.environ[library.ENV_VAR] = self.path
        with self.assertRaises(tagalloc_torch.LibraryError) as e:
            tagalloc_torch.memory_stats(device=0)
        self.assertIn("no CUDA driver", str(e.exception))

    def test_forget_stream_without_a_driver(self):
        # With no pool there is no stream to forget: the library may accept that, or refuse it
        # for want of a driver; it must not crash or refuse for another reason.
        try:
            tagalloc_torch.forget_stream(UNSEEN_STREAM, library=self.path)
        except tagalloc_torch.LibraryError as e:
            self.assertIn("no CUDA driver", str(e))
            self.assertIn("tagalloc_forget_stream", str(e))


class TestLibraryWithDriver(Clean):
    """The real library where a CUDA driver is installed: figures, or the reason there are none."""

    def setUp(self):
        super().setUp()
        if not driver_present():
            self.skipTest("no CUDA driver on this machine (TestLibraryWithoutDriver covers it)")
        self.path = built_library()

    def test_stats_snapshot_and_empty_cache(self):
        try:
            s = tagalloc_torch.memory_stats(0, library=self.path)
        except tagalloc_torch.LibraryError as e:
            self.assertIn("CUDA", str(e))  # a driver but no usable device: the reason
            self.skipTest(f"a CUDA driver but no pool: {e}")
        self.assertGreaterEqual(s["reserved_bytes.all.peak"], s["reserved_bytes.all.current"])
        snap = tagalloc_torch.snapshot(0, library=self.path)
        self.assertEqual(
            sum(seg["total_size"] for seg in snap["segments"]),
            tagalloc_torch.memory_stats(0, library=self.path)["reserved_bytes.all.current"],
        )
        tagalloc_torch.empty_cache(library=self.path)

    def test_forgetting_a_stream_it_never_saw_is_accepted(self):
        try:
            tagalloc_torch.memory_stats(0, library=self.path)
        except tagalloc_torch.LibraryError as e:
            self.assertIn("CUDA", str(e))
            self.skipTest(f"a CUDA driver but no pool: {e}")
        lib = library.load(self.path)
        self.assertEqual(lib.cdll.tagalloc_forget_stream(UNSEEN_STREAM), 0, lib.last_error())
        tagalloc_torch.forget_stream(UNSEEN_STREAM, library=self.path)
        stream = types.SimpleNamespace(cuda_stream=UNSEEN_STREAM)  # as a torch.cuda.Stream
        tagalloc_torch.forget_stream(stream, library=self.path)
        s = tagalloc_torch.memory_stats(0, library=self.path)
        self.assertEqual(s["tagalloc.graph_pools"], 0, "no graph was captured")


class TestDevice(unittest.TestCase):
    def test_ordinals_from_ints_strings_and_torch_devices(self):
        dev = tagalloc_torch._device
        with mock.patch.dict(sys.modules, {"torch": FakeTorch()}):
            self.assertEqual(dev(None), 0, "CUDA not initialised: device 0")
            self.assertEqual(dev(types.SimpleNamespace(type="cuda", index=None)), 0)
        self.assertEqual(dev(3), 3)
        self.assertEqual(dev("cuda:2"), 2)
        self.assertEqual(dev(types.SimpleNamespace(type="cuda", index=1)), 1)
        for bad in ("cpu", "cuda:x", "cuda", types.SimpleNamespace(type="cpu", index=0), 2.5):
            with self.assertRaises(ValueError):
                dev(bad)


class TestConversions(unittest.TestCase):
    def test_the_fake_drivers_snapshot_in_pytorchs_shape(self):
        # The fixture is what the pool wrote on the fake driver in the Rust test
        # the_snapshot_has_every_chunk_in_pytorchs_shape (backend-cuda/pluggable/tests/abi.rs),
        # which checks it stays so.
        with open(FIXTURE) as f:
            s = torch_snapshot.to_torch(f.read())
        self.assertEqual(set(s), {"segments", "device_traces"})
        self.assertEqual(s["device_traces"], [[]])
        (seg,) = s["segments"]
        for key in (
            "device", "address", "total_size", "stream", "segment_type", "segment_pool_id",
            "allocated_size", "active_size", "requested_size", "frames", "blocks",
        ):
            self.assertIn(key, seg)
        self.assertEqual(seg["segment_pool_id"], (0, 0))
        self.assertEqual(seg["segment_type"], "large")
        states = [b["state"] for b in seg["blocks"]]
        self.assertEqual(
            states, ["active_allocated", "active_pending_free", "active_allocated", "inactive"]
        )
        # What PyTorch's _memory_viz.segsum asserts of a segment: allocated, internal and
        # external free bytes add up to the segment.
        allocated = internal = external = 0
        for b in seg["blocks"]:
            self.assertEqual(b["frames"], [])
            if b["state"] == "active_allocated":
                self.assertLessEqual(b["requested_size"], b["size"])
                allocated += b["requested_size"]
                internal += b["size"] - b["requested_size"]
            else:
                external += b["size"]
        self.assertEqual(allocated + internal + external, seg["total_size"])
        self.assertEqual(
            seg["allocated_size"],
            sum(b["size"] for b in seg["blocks"] if b["state"] == "active_allocated"),
        )
        self.assertEqual(
            seg["active_size"],
            sum(b["size"] for b in seg["blocks"] if b["state"] != "inactive"),
        )
        self.assertEqual(pickle.loads(pickle.dumps(s)), s)

    def test_malformed_documents_are_refused(self):
        with open(FIXTURE) as f:
            good = json.load(f)
        gap = json.loads(json.dumps(good))
        gap["segments"][0]["blocks"][1]["address"] += 256
        unknown = json.loads(json.dumps(good))
        unknown["segments"][0]["blocks"][0]["state"] = "active_awaiting_free"
        short = json.loads(json.dumps(good))
        short["segments"][0]["total_size"] += 256
        for doc, words in ((gap, "expected one at"), (unknown, "unknown state"),
                           (short, "do not add up"), ({"segments": []}, "missing")):
            with self.assertRaises(ValueError) as e:
                torch_snapshot.to_torch(doc)
            self.assertIn(words, str(e.exception))

    def test_stats_layout_ends_with_the_stream_and_graph_figures(self):
        # TagallocStats only grows at its end: these are its last fields, in this order.
        names = [name for name, _ in library.Stats._fields_]
        self.assertEqual(
            names[-4:], ["stream_waits", "stream_wait_ns", "host_sync_ns", "graph_pools"]
        )
        self.assertEqual(len(set(names)), len(names))
        self.assertTrue(all(t is ctypes.c_uint64 for _, t in library.Stats._fields_[1:]))
        self.assertEqual(ctypes.sizeof(library.Stats), 8 + 8 * (len(names) - 1))

    def test_stats_under_pytorchs_names(self):
        s = library.Stats(
            status=0, in_use=5000, peak_in_use=9000, reserved=1 << 20, peak_reserved=2 << 20,
            pending=1000, allocations=10, frees=7, regions=1, live_blocks=3, pending_blocks=1,
            exhaustion_retries=2, pool_retries=1, regions_obtained=1, regions_given_back=0,
            grown=4, shrunk=2, synchronizations=1, events_recorded=5, event_queries=6,
            stream_waits=7, stream_wait_ns=8_000, host_sync_ns=9_000_000, graph_pools=2,
        )
        d = torch_stats.to_torch(s)
        self.assertEqual(d["reserved_bytes.all.current"], 1 << 20)
        self.assertEqual(d["reserved_bytes.all.peak"], 2 << 20)
        self.assertEqual(d["active_bytes.all.current"], 5000)
        self.assertEqual(d["active_bytes.all.peak"], 9000)
        self.assertEqual(d["allocated_bytes.all.current"], 4000)
        self.assertNotIn("allocated_bytes.all.peak", d, "the pool does not keep it")
        self.assertEqual((d["active.all.current"], d["allocation.all.current"]), (3, 2))
        self.assertEqual(d["num_alloc_retries"], 3)
        self.assertEqual((d["num_device_alloc"], d["num_device_free"]), (5, 2))
        self.assertEqual(d["tagalloc.event_queries"], 6)
        self.assertEqual(d["tagalloc.stream_waits"], 7)
        self.assertEqual(d["tagalloc.synchronizations"], 1)
        self.assertEqual(d["tagalloc.stream_wait_ns"], 8_000)
        self.assertEqual(d["tagalloc.host_sync_ns"], 9_000_000)
        self.assertEqual(d["tagalloc.graph_pools"], 2)


if __name__ == "__main__":
    unittest.main()
