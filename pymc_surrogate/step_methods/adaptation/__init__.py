"""What tuning adapts: the surrogate's fits and training data, the mass matrix, the coverage temperature, the draws' bound, tuning on the surrogate alone."""
