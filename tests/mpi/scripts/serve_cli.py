"""`tiletrain generate ...` with the arguments given (the console script, run by mpirun).
Python's stderr (the summary lines) goes to stdout: mpirun forwards the two streams apart
and may splice a summary line into a sample's text otherwise."""
import sys

from tiletrain.cli import main

sys.stderr = sys.stdout
sys.exit(main(sys.argv[1:]))
