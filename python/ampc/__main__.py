"""`python3 -m ampc ARGS`: the `ampc` command line."""
import os
import sys

from ampc._cli import cli_path

if __name__ == "__main__":
    try:
        binary = cli_path()
    except RuntimeError as e:  # no ampc to run: said as the CLI says its errors
        sys.exit(f"ampc: error: {e}")
    os.execv(binary, [binary] + sys.argv[1:])
