# aiter's MHA config patched with one variant's overrides: from the image in docker, else from
# the locally installed aiter (or a skeleton without aiter). Rule patch_config.
import sys
from pathlib import Path

from fabench import aiter_config
from fabench.container import aiter_image

sys.stderr = open(snakemake.log[0], "w")
overrides = dict(snakemake.params.overrides)
out, meta = Path(snakemake.output.config), Path(snakemake.output.meta)
if snakemake.input.manifest:
    aiter_image.patch_from_image(Path(snakemake.input.manifest), overrides, out, meta)
else:
    aiter_config.patch_local(overrides, out, meta)
