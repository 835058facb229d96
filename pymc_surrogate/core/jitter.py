"""Random step size and trajectory length, drawn independently of the state."""

from __future__ import annotations

import numpy as np

__all__ = ["jittered_trajectory"]


def jittered_trajectory(
    step_size: float,
    path_length: float,
    rng: np.random.Generator,
    step_jitter: float = 0.2,
    max_steps: int = 256,
    shortest: float = 0.0,
) -> tuple[float, int]:
    """Draw a step size within ``±step_jitter`` and a number of steps for the path.

    The number of steps is uniform on ``{ceil(shortest L), ..., L}`` with
    ``L = ceil(path_length / eps)``; ``shortest=0`` is the papers' codes' ``{1, ..., L}``.
    Random lengths stop the periodic trajectories that make a fixed-length HMC
    non-ergodic and, being independent of the state, keep it exact.
    """
    eps = step_size * (1.0 + step_jitter * rng.uniform(-1.0, 1.0))
    longest = int(min(max_steps, max(1, np.ceil(path_length / eps))))
    fewest = int(min(longest, max(1, np.ceil(shortest * longest))))
    return float(eps), int(rng.integers(fewest, longest + 1))
