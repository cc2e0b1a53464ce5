"""gpu_check.py where no GPU is needed: it refuses clearly without PyTorch or a GPU (a stand-in
torch package on PYTHONPATH), reads its options, compares results and draws its table."""

import contextlib
import io
import os
import subprocess
import sys
import tempfile
import unittest

import gpu_check

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
        a = gpu_check.parse_args([])
        self.assertEqual(a.modes, ["default", "expandable", "async", "tagalloc"])
        self.assertEqual(a.workloads, ["resnet50", "transformer", "multistream"])
        for bad, words in (
            (["--only", "resnet"], "unknown resnet"),
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

    def test_table(self):
        rows = [
            {
                "mode": "default", "workload": "resnet50", "peak_reserved": 6.97e9,
                "reserved_at_step_end_max": 6.5e9, "live_peak": 5.92e9,
                "median_step_s": 0.1234, "agreement": "reference",
            },
            {"mode": "tagalloc", "workload": "resnet50", "error": "exit 1: boom"},
            {
                "mode": "async", "workload": "resnet50", "peak_reserved": None,
                "reserved_at_step_end_max": 1e9, "live_peak": None,
                "median_step_s": 0.1, "agreement": "bitwise",
            },
        ]
        t = gpu_check.table(rows).splitlines()
        self.assertEqual(len(t), 5)
        self.assertEqual(t[4], "| resnet50 | async | n/a | 1.00 | n/a | 100.0 | bitwise |")
        self.assertEqual(t[2], "| resnet50 | default | 6.97 | 6.50 | 5.92 | 123.4 | reference |")
        self.assertEqual(t[3], "| resnet50 | tagalloc | — | — | — | — | error: exit 1: boom |")
        self.assertTrue(all(line.count("|") == 8 for line in t), t)


if __name__ == "__main__":
    unittest.main()
