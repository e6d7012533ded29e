"""``python -m voxflow``: the same command line as the `voxflow` script."""

from voxflow.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
