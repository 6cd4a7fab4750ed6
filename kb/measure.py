"""What every benchmark and the worker pools read off the machine: usable cores, peak memory, and
percentiles of a sample. Imports nothing of the project, so any layer may use it."""
from __future__ import annotations

import os
import resource
import sys

import numpy as np


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity, where the OS has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def peak_rss_mb() -> float:
    """Peak resident memory of this process (every benchmark reports it)."""
    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return round(kb / 1024 if sys.platform != "darwin" else kb / 1024 / 1024, 1)


def percentile(xs: list[float], q: float) -> float | None:
    """The q-th percentile (linear interpolation), None for no samples; shared by all benchmarks."""
    if not xs:
        return None
    return float(np.percentile(np.asarray(xs, dtype=np.float64), q))
