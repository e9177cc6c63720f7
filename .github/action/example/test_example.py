"""A small real suite the project's own workflow runs confined through the action (`uses: ./`)
and tests/integration/test_action.py runs here: it writes in its copy and finds the network
and the home directory closed, as the native arm promises."""

from __future__ import annotations

import os
import socket
import tempfile
import unittest
from pathlib import Path


class ConfinedSuite(unittest.TestCase):
    def test_writes_land_in_the_copy(self) -> None:
        Path("written-by-the-suite.txt").write_text("made inside\n")
        self.assertEqual(Path("written-by-the-suite.txt").read_text(), "made inside\n")

    def test_tmp_is_private_and_writable(self) -> None:
        with tempfile.NamedTemporaryFile() as handle:
            handle.write(b"x")

    def test_no_connection_out(self) -> None:
        # The caller starts a listener on the host's loopback and names its port: reachable
        # from outside, so a refusal here is the sandbox's doing.
        port = int(os.environ["SPRAWL_EXAMPLE_PORT"])
        with self.assertRaises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()

    def test_a_file_outside_the_tree_is_unseen(self) -> None:
        # The caller made this file (in its home, beside the tree) and names it.
        self.assertFalse(Path(os.environ["SPRAWL_EXAMPLE_OUTSIDE"]).exists())


if __name__ == "__main__":
    unittest.main()
