"""Stage 1, prepare: the benchmark image, aiter's config patched per variant, a job run in a container.

Nothing here imports the docker SDK at module level: the runner inside the image imports
fabench.container.aiter_config, and the image has no docker SDK.
"""
