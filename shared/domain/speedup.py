"""How a speedup reads wherever it is reported: with its 95% interval, or saying there is none."""


def speedup_text(speedup: float, interval: tuple[float, float] | None) -> str:
    """'1.009x [0.998, 1.021]', or '1.009x (no interval)' where none could be measured."""
    if interval is None:
        return f"{speedup:.3f}x (no interval)"
    return f"{speedup:.3f}x [{interval[0]:.3f}, {interval[1]:.3f}]"
