# Build the benchmark image unless its tag exists, and write its manifest (rule build_image).
from pathlib import Path

from fabench.container.image import build_image

build_image(Path(snakemake.params.dockerfile), Path(snakemake.params.context), dict(snakemake.params.build_args),
            manifest=Path(snakemake.output[0]), log=Path(snakemake.log[0]), name=snakemake.params.name)
