"""``python -m hpengine.pipeline.grag_build INDEX [key=value ...]``: the GRAG build's former path,
kept for users' scripts; the same as ``python -m hpengine.jobs.grag_build``
(:func:`hpengine.jobs.grag_build.main`)."""
import sys

from hpengine.jobs.grag_build import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
