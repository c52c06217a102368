"""Stage 2, measure: one job (variant, shape) in one process, every backend, one JSON result."""
