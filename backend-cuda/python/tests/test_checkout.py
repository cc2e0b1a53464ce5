"""tagalloc_torch in the checkout it is tested from (``<repo>/backend-cuda/python``): the
default library is the checkout's release build. Collected by the checkout's run
(``python3 -m unittest discover -s backend-cuda/python``), not by ``.ci/python-package``, which
runs the installed wheel's tests by name; run from an installed module, it fails."""

import os
import unittest

from tagalloc_torch import library


class TestCheckout(unittest.TestCase):
    def test_default_path_is_the_repositorys_release_build(self):
        path = library.default_path()
        self.assertTrue(os.path.isabs(path))
        self.assertTrue(path.endswith(os.path.join("target", "release", library.LIBRARY_NAME)))
        repo = os.path.dirname(os.path.dirname(os.path.dirname(path)))
        self.assertTrue(os.path.isfile(os.path.join(repo, "Cargo.toml")), repo)
        self.assertTrue(os.path.isdir(os.path.join(repo, "backend-cuda", "pluggable")), repo)


if __name__ == "__main__":
    unittest.main()
