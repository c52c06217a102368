"""The package's data files, found through the package (importlib.resources), so that a wheel or a
non-editable install finds them as a checkout does.

- schemas/: config.schema.yaml, result.schema.json, published.schema.yaml. The files live in
  workflow/schemas, where Snakemake workflows keep them; src/fabench/schemas links there, and
  pyproject.toml ships them as package data: one copy in the repository, one in a wheel.
- report/templates/: the Jinja templates of the run report and the comparison.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

SCHEMA_DIR = Path(str(files("fabench").joinpath("schemas")))
TEMPLATE_DIR = Path(str(files("fabench").joinpath("report", "templates")))
