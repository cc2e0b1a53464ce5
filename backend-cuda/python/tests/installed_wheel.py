"""tagalloc_torch as ``pip install ./backend-cuda/python`` installs it: the library inside the
package, found with no variable set. Run by ``bash .ci/python-package`` from the installed
wheel, by name (``-p installed_wheel.py``): its name keeps it out of a checkout's discovery,
where there is no wheel; run against a checkout's module, it fails."""

import os
import sys
import unittest
from unittest import mock

import tagalloc_torch
from tagalloc_torch import library


class TestInstalled(unittest.TestCase):
    def setUp(self):
        env = mock.patch.dict(os.environ)
        env.start()
        self.addCleanup(env.stop)
        os.environ.pop(library.ENV_VAR, None)

    def test_the_module_is_the_installed_one(self):
        self.assertTrue(
            tagalloc_torch.__file__.startswith(sys.prefix),
            f"{tagalloc_torch.__file__} is not in the environment {sys.prefix}",
        )

    def test_the_wheel_holds_the_library_and_finds_it_first(self):
        packaged = library.packaged_path()
        self.assertIsNotNone(packaged, f"no library beside the module in {library.PACKAGE_DIR}")
        self.assertEqual(library.find(), packaged)
        self.assertEqual(library.load().path, packaged)


if __name__ == "__main__":
    unittest.main()
