"""``python -m hpengine``: the same front door as the ``hpengine`` command."""
import sys

from hpengine.cli import main

if __name__ == "__main__":
    sys.exit(main())
