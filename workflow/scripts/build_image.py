# Build the benchmark image unless its tag exists, and write its manifest (rule build_image).
from pathlib import Path

from fabench.container.image import build_image

image = snakemake.params.image
build_image(image["dockerfile"], image["context"], image["build_args"], manifest=Path(snakemake.output[0]),
            log=Path(snakemake.log[0]), name=image["name"])
