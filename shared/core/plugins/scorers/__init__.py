"""Score plugins: rank the feasible nodes for one task (higher is better)."""
