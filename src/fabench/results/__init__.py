"""Stage 3, results: the result contract, collecting a run's job results."""
