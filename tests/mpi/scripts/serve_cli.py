"""`tiletrain generate ...` with the arguments given (the console script, run by mpirun)."""
import sys

from tiletrain.cli import main

sys.exit(main(sys.argv[1:]))
