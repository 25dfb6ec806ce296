"""docs/protocol.md is generated from the wire declarations (scripts/gen_protocol.py): changing a
message, a route or an error code without regenerating the document fails here. Touches: nothing
(the generator runs with --check and writes no file)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_protocol_doc_matches_the_wire_declarations() -> None:
    out = subprocess.run(
        [sys.executable, REPO / "scripts" / "gen_protocol.py", "--check"], capture_output=True, text=True, cwd=REPO
    )
    assert out.returncode == 0, out.stderr
