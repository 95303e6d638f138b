"""Numbers as the realism card stores them: rounded, and None where a float would not be strict JSON."""

from __future__ import annotations

import numpy as np


def rounded(x: float | None, digits: int = 4) -> float | None:
    """Rounded float, None for None / NaN / inf (realism.json stays strict JSON)."""
    return None if x is None or not np.isfinite(x) else round(float(x), digits)
