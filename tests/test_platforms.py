"""Several platform versions in one go, for real: two CPU base images that differ in their torch
version stand in for two ROCm releases. One command builds both images and runs both runs; each
run is archived under its own platform version, and one comparison puts them side by side."""

import json

import pytest
import yaml

from conftest import CPU_BASE_IMAGE, OLDER_CPU_BASE_IMAGE, ROOT
from workflow_util import snakemake

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def platforms_config() -> dict:
    config = yaml.safe_load((ROOT / ".test" / "config-docker" / "config.yaml").read_text())
    no_aiter = {"AITER_COMMIT": "", "TRITON_VERSION": ""}
    config.update(run="versions", variants={"default": config["variants"]["default"]},
                  platforms={"new": {"build_args": {"BASE_IMAGE": CPU_BASE_IMAGE, **no_aiter}},
                             "old": {"build_args": {"BASE_IMAGE": OLDER_CPU_BASE_IMAGE, **no_aiter}}})
    return config


def test_two_platform_images_two_runs_two_archive_entries_one_comparison(cpu_base_image, older_cpu_base_image,
                                                                        tmp_path):
    config = platforms_config()
    proc = snakemake(tmp_path, "--cores", "1", "archive", "compare", config=config)
    logs = "\n".join(f"== {p}\n{p.read_text()[-2000:]}" for p in sorted((tmp_path / "logs").rglob("*.log")))
    assert proc.returncode == 0, proc.stderr[-4000:] + logs
    images, entries = set(), {}
    for label in ("new", "old"):
        run = tmp_path / "results" / f"versions-{label}"
        result = json.loads(next(run.glob("default/b*.json")).read_text())
        images.add(result["provenance"]["image"])
        entries[label] = json.loads((run / "archived.json").read_text())["path"]
        assert (run / "report.md").is_file()
    assert len(images) == 2  # each run ran in its own image
    labels = {label: path.split("/")[1] for label, path in entries.items()}
    assert labels["new"].startswith("cpu-torch2.") and labels["old"].startswith("cpu-torch1.")
    comparison = json.loads((tmp_path / "compare" / "compare.json").read_text())
    assert sorted(e["label"] for e in comparison["entries"]) == sorted(labels.values())
    assert comparison["rows"], "the comparison has no rows"
