"""fabench: reproduce published flash-attention benchmarks, one process per job."""

__version__ = "0.1.0"
