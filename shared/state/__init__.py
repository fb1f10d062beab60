"""The cluster state every service folds from the event log (pure: no I/O, no clock)."""
