"""gpu_check.py where no GPU is needed: it refuses clearly without PyTorch or a GPU (a stand-in
torch package on PYTHONPATH), reads its options, times steps with one synchronisation (against
a stand-in torch), gathers the pool's figures, compares results and draws its table."""

import contextlib
import io
import os
import subprocess
import sys
import tempfile
import types
import unittest
from unittest import mock

import gpu_check
import tagalloc_torch

SCRIPT = os.path.abspath(gpu_check.__file__)


def run_with_torch(source):
    """Runs the script with a package ``torch`` whose ``__init__.py`` is ``source``."""
    with tempfile.TemporaryDirectory() as d:
        os.mkdir(os.path.join(d, "torch"))
        with open(os.path.join(d, "torch", "__init__.py"), "w") as f:
            f.write(source)
        env = dict(os.environ, PYTHONPATH=d)
        return subprocess.run(
            [sys.executable, SCRIPT], env=env, capture_output=True, text=True, timeout=60
        )


class TestRefusals(unittest.TestCase):
    def test_without_torch(self):
        p = run_with_torch("raise ImportError('No module named torch (stand-in)')\n")
        self.assertEqual(p.returncode, 2)
        self.assertIn("PyTorch is not installed", p.stderr)
        self.assertIn("nothing was run", p.stderr)
        self.assertEqual(p.stdout, "")

    def test_without_a_gpu(self):
        p = run_with_torch(
            "import types\ncuda = types.SimpleNamespace(is_available=lambda: False)\n"
        )
        self.assertEqual(p.returncode, 2)
        self.assertIn("no CUDA GPU visible to PyTorch", p.stderr)
        self.assertEqual(p.stdout, "")


class TestParts(unittest.TestCase):
    def test_only_picks_allocators_and_workloads(self):
        a = gpu_check.parse_args(["--only", "tagalloc,resnet50"])
        self.assertEqual((a.modes, a.workloads), (["tagalloc"], ["resnet50"]))
        a = gpu_check.parse_args(["--only", "graph,default,tagalloc"])
        self.assertEqual((a.modes, a.workloads), (["default", "tagalloc"], ["graph"]))
        a = gpu_check.parse_args([])
        self.assertEqual(a.modes, ["default", "expandable", "async", "tagalloc"])
        self.assertEqual(a.workloads, ["resnet50", "transformer", "multistream", "graph"])
        self.assertEqual(set(gpu_check.DEFAULT_STEPS), set(gpu_check.WORKLOADS))
        self.assertEqual(set(gpu_check.WORKLOAD_FACTORIES), set(gpu_check.WORKLOADS))
        for bad, words in (
            (["--only", "resnet"], "unknown resnet"),
            (["--only", "graphs"], "unknown graphs"),
            (["--steps", str(gpu_check.WARMUP)], "warm-up"),
        ):
            err = io.StringIO()
            with self.assertRaises(SystemExit), contextlib.redirect_stderr(err):
                gpu_check.parse_args(bad)
            self.assertIn(words, err.getvalue())

    def test_agreement(self):
        def row(*values):
            return {"values": [float(v).hex() for v in values]}

        ref = row(1.0, 2.0)
        self.assertEqual(gpu_check.agreement(ref, ref), "reference")
        self.assertEqual(gpu_check.agreement(row(1.0, 2.0), ref), "bitwise")
        self.assertEqual(gpu_check.agreement(row(1.0, 2.0 * (1 + 1e-7)), ref), "within 1e-5")
        self.assertIn("differs", gpu_check.agreement(row(1.0, 2.1), ref))
        self.assertEqual(gpu_check.agreement(row(1.0), None), "n/a (default not run)")
        self.assertEqual(gpu_check.agreement({"error": "x"}, ref), "—")

    def test_agreement_of_the_graph_workload(self):
        def row(graph_vs_eager, *values):
            return {"values": [float(v).hex() for v in values], "graph_vs_eager": graph_vs_eager}

        ref = row("bitwise", 1.0, 2.0)
        self.assertEqual(gpu_check.agreement(ref, ref), "graph = eager bitwise; reference")
        self.assertEqual(
            gpu_check.agreement(row("within 1e-5", 1.0, 2.0), ref),
            "graph = eager within 1e-5; bitwise",
        )
        self.assertEqual(
            gpu_check.agreement(row("bitwise", 1.0, 2.0), None),
            "graph = eager bitwise; n/a (default not run)",
        )
        off = gpu_check.agreement(row("differs (max rel. diff 1.00e-01)", 1.0, 2.2), ref)
        self.assertTrue(off.startswith("graph = eager differs (max rel. diff 1.00e-01); "), off)
        self.assertIn("; differs (max rel. diff 1.00e-01)", off)

    def test_compare(self):
        self.assertEqual(gpu_check.compare([1.0, 2.0], [1.0, 2.0]), "bitwise")
        self.assertEqual(gpu_check.compare([1.0, 2.0 * (1 + 2e-6)], [1.0, 2.0]), "within 1e-5")
        self.assertEqual(
            gpu_check.compare([1.0, 3.0], [1.0, 2.0]), "differs (max rel. diff 5.00e-01)"
        )
        self.assertEqual(gpu_check.compare([1.0], [1.0, 2.0]), "differs (1 values against 2)")
        self.assertIn("differs", gpu_check.compare([float("nan")], [float("nan")]))

    def test_table(self):
        rows = [
            {
                "mode": "default", "workload": "resnet50", "peak_reserved": 6.97e9,
                "reserved_at_step_end_max": 6.5e9, "live_peak": 5.92e9,
                "mean_step_s": 0.1234, "pool": None, "agreement": "reference",
            },
            {"mode": "tagalloc", "workload": "resnet50", "error": "exit 1: boom"},
            {
                "mode": "async", "workload": "resnet50", "peak_reserved": None,
                "reserved_at_step_end_max": 1e9, "live_peak": None,
                "mean_step_s": 0.1, "pool": None, "agreement": "bitwise",
            },
            {
                "mode": "tagalloc", "workload": "graph", "peak_reserved": 2e9,
                "reserved_at_step_end_max": 1.5e9, "live_peak": 1.25e9, "mean_step_s": 0.000412,
                "pool": {
                    "stream_waits": 12, "stream_wait_ns": 3_456_789, "synchronizations": 2,
                    "host_sync_ns": 250_000, "graph_pools_after_release": 0,
                },
                "agreement": "graph = eager bitwise; bitwise",
            },
        ]
        t = gpu_check.table(rows).splitlines()
        self.assertEqual(len(t), 6)
        self.assertEqual(
            t[0],
            "| workload | allocator | peak reserved (GB) | max reserved at step ends (GB) "
            "| live peak (GB) | mean step (ms) | stream waits | issuing them (ms) | host syncs "
            "| blocked in them (ms) | results vs default |",
        )
        self.assertEqual(
            t[2], "| resnet50 | default | 6.97 | 6.50 | 5.92 | 123.4 | n/a | n/a | n/a | n/a "
            "| reference |",
        )
        self.assertEqual(
            t[3], "| resnet50 | tagalloc | — | — | — | — | — | — | — | — | error: exit 1: boom |"
        )
        self.assertEqual(
            t[4], "| resnet50 | async | n/a | 1.00 | n/a | 100.0 | n/a | n/a | n/a | n/a "
            "| bitwise |",
        )
        self.assertEqual(
            t[5], "| graph | tagalloc | 2.00 | 1.50 | 1.25 | 0.412 | 12 | 3.5 | 2 | 0.250 "
            "| graph = eager bitwise; bitwise |",
        )
        self.assertTrue(all(line.count("|") == 12 for line in t), t)


class FakeRecord(list):
    """The device buffer run_steps keeps the values in, as a list; a step's value is stored."""

    def __setitem__(self, i, tensor):
        super().__setitem__(i, tensor.value)

    def tolist(self):
        return list(self)


class FakeValue:
    """A step's result: a device scalar run_steps detaches and stores."""

    def __init__(self, value):
        self.value = value

    def detach(self):
        return self


class TestChildParts(unittest.TestCase):
    """The child's pieces that need no GPU, against stand-ins."""

    def test_run_steps_synchronises_after_the_warm_up_and_once_at_the_end(self):
        events = []
        torch = types.SimpleNamespace(
            zeros=lambda n, device: FakeRecord([0.0] * n),
            cuda=types.SimpleNamespace(synchronize=lambda dev: events.append("sync")),
        )

        def step(i):
            events.append(i)
            return FakeValue(i / 4)

        reserved = iter([3, 9, 4, 1, 2, 7, 5, 6])
        steps = gpu_check.WARMUP + 3
        out = gpu_check.run_steps(torch, "cuda:0", step, steps, lambda: next(reserved))
        warm = list(range(gpu_check.WARMUP))
        self.assertEqual(events, [*warm, "sync", *range(gpu_check.WARMUP, steps), "sync"])
        self.assertEqual(out["values"], [i / 4 for i in range(steps)])
        self.assertEqual(out["timed_steps"], 3)
        self.assertEqual(out["mean_step_s"], out["elapsed_s"] / 3)
        self.assertGreaterEqual(out["elapsed_s"], 0)
        self.assertEqual(out["reserved_at_step_end_max"], 9)
        self.assertNotIn("median_step_s", out)

    def test_the_pools_figures_for_tagalloc_and_none_for_pytorchs_allocators(self):
        stats = {
            "reserved_bytes.all.peak": 10, "active_bytes.all.peak": 8, "num_alloc_retries": 0,
            "tagalloc.stream_waits": 5, "tagalloc.stream_wait_ns": 6, "tagalloc.graph_pools": 1,
            "tagalloc.synchronizations": 7, "tagalloc.host_sync_ns": 8,
        }
        pool = types.SimpleNamespace(memory_stats=lambda device: stats)
        f = gpu_check.memory_figures(None, None, pool)
        self.assertEqual((f["peak_reserved"], f["live_peak"]), (10, 8))
        self.assertEqual(
            f["pool"],
            {"stream_waits": 5, "stream_wait_ns": 6, "synchronizations": 7, "host_sync_ns": 8},
        )
        self.assertEqual(f["extra"]["tagalloc.graph_pools"], 1)

        def unsupported(*_):
            raise RuntimeError("not supported by this allocator")

        torch = types.SimpleNamespace(
            cuda=types.SimpleNamespace(
                memory_stats=unsupported, max_memory_reserved=lambda dev: 4,
                max_memory_allocated=unsupported,
            )
        )
        f = gpu_check.memory_figures(torch, "cuda:0", None)
        self.assertEqual((f["peak_reserved"], f["live_peak"], f["pool"]), (4, None, None))

    def test_the_graph_workload_under_tagalloc_needs_the_graph_pool_hooks(self):
        # enable_tagalloc puts the package's directory on sys.path: keep that to this test.
        path = mock.patch.object(sys, "path", list(sys.path))
        path.start()
        self.addCleanup(path.stop)
        with mock.patch.object(tagalloc_torch, "enable") as enable, mock.patch.object(
            tagalloc_torch, "graphs_supported", return_value=False
        ):
            self.assertIs(gpu_check.enable_tagalloc("/lib.so", "resnet50"), tagalloc_torch)
            with self.assertRaises(SystemExit) as e:
                gpu_check.enable_tagalloc("/lib.so", "graph")
        self.assertIn("no graph-pool hooks", str(e.exception.code))
        self.assertEqual([c.args for c in enable.call_args_list], [("/lib.so",)] * 2)
        with mock.patch.object(tagalloc_torch, "enable"), mock.patch.object(
            tagalloc_torch, "graphs_supported", return_value=True
        ):
            self.assertIs(gpu_check.enable_tagalloc(None, "graph"), tagalloc_torch)


if __name__ == "__main__":
    unittest.main()
