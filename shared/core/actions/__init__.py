"""The stages of a scheduling cycle (verbs), run in order by ``shared.core.cycle.run_cycle``."""
