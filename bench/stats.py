"""Percentiles and formatting shared by the benchmarks."""


def pct(samples: list[float], p: float) -> float:
    """The nearest-rank percentile ``p`` (0-100) of ``samples``."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def ms(value: float) -> str:
    return f"{value * 1000:9.2f} ms"
