"""What is measured: the backends (registry: each one's preparation and call), aiter's kernel loader,
FlashAttention-4's availability and call (fa4_kernel), and the types that say why a backend failed.

May import: the device room (a backend's own profiled call). Never the cell, the job or launch/.
"""
