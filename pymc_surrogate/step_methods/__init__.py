"""PyMC step methods built on surrogates of the potential."""

from pymc_surrogate.step_methods.adaptive_surrogate_hmc import AdaptiveSurrogateHMC
from pymc_surrogate.step_methods.base import SurrogateStep
from pymc_surrogate.step_methods.evaluation.model_functions import ModelEvaluationError
from pymc_surrogate.step_methods.evaluation.store import (
           EvaluationStore,
           StoreMismatchError,
)
from pymc_surrogate.step_methods.kernel_hmc import KernelHMC
from pymc_surrogate.step_methods.settings import GridBox, HMCKernel, WarmUp
from pymc_surrogate.step_methods.sparse_grid_hmc import SparseGridHMC
from pymc_surrogate.step_methods.surrogate_hmc import SurrogateHMC
from pymc_surrogate.step_methods.variational_hmc import VariationalHMC

__all__ = ["SurrogateStep", "SurrogateHMC", "AdaptiveSurrogateHMC", "VariationalHMC",
           "KernelHMC", "SparseGridHMC", "ModelEvaluationError", "EvaluationStore",
           "StoreMismatchError", "HMCKernel", "WarmUp", "GridBox"]
