"""Scheduling plugins: one module each, each with a ``NAME`` and a ``build(args)`` factory."""
