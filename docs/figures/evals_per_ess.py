"""The README's figure: model evaluations per effective sample, ours against NUTS.

Every number is a measured run documented in ``docs/measurements.md`` (command, commit,
table under ``benchmarks/results/``); evaluations are logp + gradient calls, tuning included,
per minimum bulk ESS over the parameters. Run from the checkout to redraw::

    python docs/figures/evals_per_ess.py
"""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

#: (problem, our step method, ours, NUTS) -- sources in docs/measurements.md
RUNS = [
    ("Elliptic PDE, d = 20\n(black box; NUTS: adjoint)", "SurrogateHMC", 3.9, 19.5),  # pde_showcase.md, fb6716a
    ("Logistic regression\nN = 1e5, d = 50", "VariationalHMC", 2.8, 19.0),  # variational_*.md, 35eff0c
    ("Probit regression\nN = 1e4, d = 5", "VariationalHMC", 1.7, 14.3),  # variational_*.md, 35eff0c
    ("ICA, 25 parameters", "VariationalHMC", 4.2, 176.0),  # variational_*.md, 35eff0c
    ("GP hyperparameters\nd = 3", "SparseGridHMC", 2.1, 27.5),  # sparse_grid_paper.md, 8299acb
    ("Random effects, noisy\nlikelihood (NUTS: exact)", "KernelHMC", 3.5, 13.1),  # kernel_hmc.md
]


def main() -> Path:
    fig, ax = plt.subplots(figsize=(8, 3.6))
    y = np.arange(len(RUNS))
    ours = [r[2] for r in RUNS]
    nuts = [r[3] for r in RUNS]
    ax.barh(y - 0.2, nuts, height=0.4, color="0.7", label="PyMC's NUTS")
    ax.barh(y + 0.2, ours, height=0.4, color="C0", label="pymc-surrogate")
    for i, (_, name, value, _) in enumerate(RUNS):
        ax.text(value * 1.08, i + 0.2, name, va="center", fontsize=8)
    ax.set_yticks(y, [r[0] for r in RUNS], fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("model evaluations (logp + gradient) per effective sample, tuning included")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    out = Path(__file__).with_suffix(".png")
    fig.savefig(out, dpi=110)
    return out


if __name__ == "__main__":
    print(main())
