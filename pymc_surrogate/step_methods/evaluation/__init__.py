"""The true model: its compiled functions, the evaluation store shared by the chains, and batched evaluation on executors."""
