#!/usr/bin/env python3
"""Tests of scripts/import-circles.py itself, on crates under
scripts/tests/circles/: a check that cannot fail is a defect, so each case
states what the script must say.

- continued/: a real circle (a -> b -> a) whose `use crate::b` follows a
  backslash-continued string, as the tuner writes its long messages. Must
  exit 1 naming a, b. (The old regex stripper, `"(?:\\\\.|[^"\\\\])*"` without
  re.S, printed "no import circle": the quote parity flipped at the
  continued line.)
- literals/: the same circle behind a char literal '"', a raw string
  holding a quote, escaped quotes, lifetimes and a nested block comment.
- quoted/: b -> a is real; a's "imports" of b are only inside strings and
  comments. Must exit 0.

    python3 scripts/test_import_circles.py
"""

import subprocess
import sys
from pathlib import Path

here = Path(__file__).resolve().parent
script = here / "import-circles.py"
cases = here / "tests" / "circles"


def run(crate):
    p = subprocess.run([sys.executable, str(script), str(cases / crate / "src")], capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


# (crate, expected exit, text the output must hold, what a failure means)
CASES = [
    ("continued", 1, "circle: a, b", "the circle behind a backslash-continued string was not seen"),
    ("literals", 1, "circle: a, b", "the circle behind char, raw and escaped quotes and lifetimes was not seen"),
    ("quoted", 0, "no import circle", "imports inside strings and comments were read as code"),
]

failed = 0
for crate, want_rc, want_text, meaning in CASES:
    rc, out = run(crate)
    if rc != want_rc or want_text not in out:
        print(f"FAIL {crate}: {meaning} (exit {rc}, expected {want_rc}):\n{out}")
        failed += 1
    else:
        print(f"ok   {crate}: exit {rc}, {want_text!r}")
sys.exit(1 if failed else 0)
