"""examples/cosmoflow.py as a launcher script (its arguments passed through)."""
import runpy
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "cosmoflow.py"
sys.argv = [str(EXAMPLE)] + sys.argv[1:]
runpy.run_path(str(EXAMPLE), run_name="__main__")
