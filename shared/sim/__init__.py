"""A discrete-event simulator that drives the same pure core from a trace (pure, no I/O but CSV)."""
