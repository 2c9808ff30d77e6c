"""examples/cosmoflow.py as a launcher script (its arguments passed through).  With
COSMOFLOW_ECHO_DIR set, each rank also writes what it prints to <dir>/rank<r>.txt: a job's
last lines can be dropped by the launcher's output forwarding as the ranks exit, a file is not."""
import os
import runpy
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "cosmoflow.py"


class _Echo:
    def __init__(self, stream, path):
        self.stream, self.file = stream, open(path, "w")

    def write(self, text):
        self.file.write(text)
        self.file.flush()
        return self.stream.write(text)

    def flush(self):
        self.stream.flush()

    def __getattr__(self, name):
        return getattr(self.stream, name)


if os.environ.get("COSMOFLOW_ECHO_DIR"):
    rank = os.environ.get("OMPI_COMM_WORLD_RANK", "0")
    sys.stdout = _Echo(sys.stdout, Path(os.environ["COSMOFLOW_ECHO_DIR"]) / f"rank{rank}.txt")
sys.argv = [str(EXAMPLE)] + sys.argv[1:]
runpy.run_path(str(EXAMPLE), run_name="__main__")
