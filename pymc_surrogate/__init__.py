"""pymc-surrogate: Hamiltonian Monte Carlo on cheap surrogates of expensive PyMC models.

Every step method runs its trajectories on a numpy surrogate of the potential and
corrects with the true model logp, so the chain targets the exact posterior.
"""

from pymc_surrogate.step_methods import (
    AdaptiveSurrogateHMC,
    EvaluationStore,
    GridBox,
    HMCKernel,
    KernelHMC,
    ModelEvaluationError,
    SparseGridHMC,
    StoreMismatchError,
    SurrogateHMC,
    SurrogateStep,
    VariationalHMC,
    WarmUp,
)

__version__ = "0.1.0"

# Every public step method, by name: tests and benchmarks are parametrised over it.
STEP_METHODS: dict[str, type[SurrogateStep]] = {
    "SurrogateHMC": SurrogateHMC,
    "AdaptiveSurrogateHMC": AdaptiveSurrogateHMC,
    "VariationalHMC": VariationalHMC,
    "KernelHMC": KernelHMC,
    "SparseGridHMC": SparseGridHMC,
}

__all__ = ["SurrogateHMC", "AdaptiveSurrogateHMC", "VariationalHMC", "KernelHMC", "SparseGridHMC", "SurrogateStep", "ModelEvaluationError", "EvaluationStore", "StoreMismatchError", "STEP_METHODS", "HMCKernel", "WarmUp", "GridBox"]
