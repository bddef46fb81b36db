"""Figure 7's error bars are the 95% bootstrap intervals of the data behind it."""

from __future__ import annotations

import numpy as np
import pandas as pd

from gapo.repro.plotting import coherence_figure


def test_coherence_figure_draws_the_bootstrap_interval():
    rows = pd.DataFrame(
        {
            "model": ["baseline", "baseline"],
            "temperature": [0.5, 0.9],
            "creativity": [0.6, 0.7],
            "math/verify": [0.5, 0.4],
            "math/verify_std": [0.01, 0.01],
            "math/verify_ci_low": [0.3, 0.1],
            "math/verify_ci_high": [0.6, 0.7],
        }
    )
    fig = coherence_figure(rows)
    (container,) = fig.axes[0].containers
    segments = container.lines[2][0].get_segments()  # one vertical bar per point: [(x, low), (x, high)]
    bars = [(round(seg[0][1], 6), round(seg[1][1], 6)) for seg in segments]
    assert bars == [(0.3, 0.6), (0.1, 0.7)]
    assert "95% interval" in fig.axes[0].get_ylabel()
    legacy = rows.drop(columns=["math/verify_ci_low", "math/verify_ci_high"])
    (container,) = coherence_figure(legacy).axes[0].containers
    heights = [np.ptp([p[1] for p in seg]) for seg in container.lines[2][0].get_segments()]
    assert np.allclose(heights, [0.02, 0.02])
