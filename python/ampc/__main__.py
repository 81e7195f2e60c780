"""`python3 -m ampc ARGS`: the `ampc` command line."""
import os
import sys

from ampc._cli import cli_path

if __name__ == "__main__":
    binary = cli_path()
    os.execv(binary, [binary] + sys.argv[1:])
