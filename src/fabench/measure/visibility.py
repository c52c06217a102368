"""The environment a measuring process is handed to say which GPU it measures on.

Torch-free: the runner and the container launcher (which never import torch) write it, the
measuring process (fabench.measure.provenance) reads it back into its result.
"""

# The job's GPU lease (fabench.measure.launch.lease), as JSON, for the processes the job starts.
LEASE_ENV = "FABENCH_DEVICE_LEASE"
