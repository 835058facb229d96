"""The surrogate kernels, their tuned values and their exact corrections."""
