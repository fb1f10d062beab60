"""A silent HiGHS solver, for the core's and the simulator's linear programs."""

from __future__ import annotations

import os
import sys

import highspy

_BANNER_SHOWN = False


def silent_highs() -> highspy.Highs:
    """A HiGHS instance that prints nothing (the first one made prints a banner: kept off stdout,
    so a benchmark's last line stays its JSON figures)."""
    global _BANNER_SHOWN
    if not _BANNER_SHOWN:
        sys.stdout.flush()
        saved = os.dup(1)
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            try:
                h = highspy.Highs()  # type: ignore[no-untyped-call]
            finally:
                os.dup2(saved, 1)
                os.close(saved)
        _BANNER_SHOWN = True
    else:
        h = highspy.Highs()  # type: ignore[no-untyped-call]
    h.setOptionValue("output_flag", False)
    return h
