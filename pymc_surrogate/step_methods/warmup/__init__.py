"""The exact exploration that gathers the training data, shared by the chains through the store."""
