"""A backend the published-numbers file names must be one fabench knows (issue 32, item 7): a
misspelt or foreign name in a label, a row's times, a row's speedups or the appendix is one line
naming the row and the known backends, never a column silently compared with nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fabench.measure.backends.registry import BACKENDS
from fabench.results import published as published_module
from fabench.results.published import PublishedError, load_published

PUBLISHED = Path(__file__).resolve().parents[1] / "report" / "published" / "mi300x-2025-12-30.yaml"
KNOWN = "native, ck, triton, sdpa, sdpa_cudnn, sdpa_flash, flex, fa4"


def rename(mapping: dict, old: str, new: str) -> None:
    mapping[new] = mapping.pop(old)


# Every place a published file names a backend: how to misname one there, and the place's name.
PLACES = {
    "label": (lambda p: p["labels"].update(sdpa_cudnnn="cuDNN"), "labels"),
    "times of a row": (lambda p: rename(p["variants"]["default"]["results"][1]["ms"], "native", "natvie"),
                       "variants.default.results.1 (b4-s1024-h8-d256).ms"),
    "speedups of a row": (lambda p: rename(p["variants"]["tuned"]["results"][3]["speedup"], "ck", "cudnn"),
                          "variants.tuned.results.3 (b4-s4096-h8-d256).speedup"),
    "appendix output": (lambda p: rename(p["appendix"]["full_benchmark_output"]["results"][0]["ms"], "triton", "fa3"),
                        "appendix.full_benchmark_output.results.0 (b4-s512-h8-d256).ms"),
    "appendix CK vs Triton": (lambda p: rename(p["appendix"]["ck_vs_triton"]["ms"], "ck", "ck_tile"),
                              "appendix.ck_vs_triton.ms"),
}


@pytest.mark.parametrize("place", list(PLACES))
def test_an_unknown_backend_is_one_line_naming_the_row_and_the_known_backends(tmp_path, place):
    published = yaml.safe_load(PUBLISHED.read_text())
    misname, where = PLACES[place]
    misname(published)
    path = tmp_path / "published.yaml"
    path.write_text(yaml.safe_dump(published, sort_keys=False))
    with pytest.raises(PublishedError) as info:
        load_published(path)
    line = str(info.value)
    assert line.startswith(f"{path}: {where}: ") and line.endswith(f"({KNOWN})") and "\n" not in line, line


def test_the_known_backends_are_the_registry_and_the_committed_file_names_only_them():
    assert published_module.known_backends() == list(BACKENDS) == KNOWN.split(", ")
    assert load_published(PUBLISHED)["roles"] == {"baseline": "native", "vendor": "ck", "triton": "triton"}
