"""Stage 1, prepare: the benchmark image, aiter's config patched per variant, a job run in a container.

* recipe: the image's tag (a content hash of what goes into it), its manifest's name, the build
  arguments its Dockerfile declares: read without an engine
* image: the image's build and its manifest; engine_answers
* probe: run inside the image (``python3 -m fabench.container.probe OUT``) to say what it holds
* aiter_image: aiter's MHA config patched from the file inside the image (fabench.aiter_config
  finds and patches it on this host)
* job: one benchmark job in a container (mounts, environment, devices, clean-up)
* __main__: ``python -m fabench.container run-job``, the only command line

Nothing here imports the docker SDK at module level: the runner inside the image imports
fabench.aiter_config, and the image has no docker SDK.
"""
