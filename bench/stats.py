"""Percentiles, formatting and process CPU time shared by the benchmarks."""

import os
from pathlib import Path


def pct(samples: list[float], p: float) -> float:
    """The nearest-rank percentile ``p`` (0-100) of ``samples``."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def ms(value: float) -> str:
    return f"{value * 1000:9.2f} ms"


def cpu_seconds(pids: list[int]) -> float:
    """The CPU time (user + system) the processes ``pids`` used so far (Linux /proc)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / os.sysconf("SC_CLK_TCK")
