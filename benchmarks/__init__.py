"""Benchmarks of pymc-surrogate's step methods against PyMC's samplers.

``benchmarks.harness.run_benchmark`` is the API; ``python benchmarks/run.py --help`` the CLI.
"""

from benchmarks.harness import COLUMNS, SMOKE, run_benchmark

__all__ = ["COLUMNS", "SMOKE", "run_benchmark"]
