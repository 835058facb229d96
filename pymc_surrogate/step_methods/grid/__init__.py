"""SparseGridHMC's domain, grid precompute and grid field."""
