"""The soak test in its short form (CI): every fault kind at least once, then checks of the run
files, memory and descriptors (tests/soak/soak.py; the long form is run by hand, see
docs/soak.md)."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.environ.get("GLINT_BIN", os.path.join(HERE, "..", "..", "build", "bin"))


def test_soak_short():
    minutes = os.environ.get("GLINT_SOAK_MINUTES", "1")
    r = subprocess.run([sys.executable, os.path.join(HERE, "soak.py"), "--bin", BIN,
                        "--minutes", minutes], capture_output=True, text=True, timeout=900)
    print(r.stdout[-4000:])
    print(r.stderr[-4000:])
    assert r.returncode == 0, r.stdout[-2000:]
    assert "0 failure(s)" in r.stdout
