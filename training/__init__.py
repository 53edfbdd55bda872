"""The JAX training worker: `python -m training run|control` (see docs/ARCHITECTURE.md, "The trainer")."""
