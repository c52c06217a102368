"""The published report's numbers (report/published/*.yaml): loading, lookup, and recasting
them as a collected run so the report renderer can draw the published tables itself.

Recasting is what makes the golden test meaningful: the published numbers go through the same
renderer as a measured run, and the rendered tables must equal the published text.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from fabench.config import quote, schema_error
from fabench.results.collect import shape_id, shape_key
from fabench.results.contract import backend_entry

PROJECT = Path(__file__).resolve().parents[3]
DEFAULT_PUBLISHED = PROJECT / "report" / "published" / "mi300x-2025-12-30.yaml"
PUBLISHED_SCHEMA = PROJECT / "workflow" / "schemas" / "published.schema.yaml"
NOT_PRINTED = "not printed in the published report"


class PublishedError(ValueError):
    """A published-numbers file the report cannot read: the message names the file and what is
    wrong, on one line."""


def load_published(path: str | Path = DEFAULT_PUBLISHED, schema: str | Path = PUBLISHED_SCHEMA) -> dict:
    """The published numbers of `path`, checked against the schema and across keys."""
    path = Path(path)
    if not path.is_file():
        raise PublishedError(f"{path}: " + ("not a file" if path.exists() else "no such file"))
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise PublishedError(f"{path} is not a text file (expected YAML like {DEFAULT_PUBLISHED.name})") from None
    except OSError as err:
        raise PublishedError(f"{path}: {err.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise PublishedError(f"{path} is not YAML: {yaml_problem(err, text)}") from None
    problem = schema_error(data, yaml.safe_load(Path(schema).read_text())) or _consistency_error(data)
    if problem:
        raise PublishedError(f"{path}: {problem}")
    return data


def yaml_problem(err: yaml.YAMLError, text: str) -> str:
    """What the YAML parser objected to, with the one line of the file it points at."""
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    if mark is None:
        return problem
    lines = text.splitlines()
    line = lines[mark.line] if mark.line < len(lines) else ""
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}: {quote(line)}"


def _consistency_error(published: dict) -> str | None:
    """What the schema cannot say: every role and the appendix name a listed backend and variant."""
    for role, name in published["roles"].items():
        if name not in published["labels"]:
            return f"roles.{role}: {name!r} has no entry in labels ({', '.join(published['labels'])})"
    extra = published.get("appendix", {}).get("ck_vs_triton")
    if extra and extra["variant"] not in published["variants"]:
        return (f"appendix.ck_vs_triton.variant: {extra['variant']!r} is not one of the variants "
                f"({', '.join(published['variants'])})")
    from fabench.report.sections.published_claims import claim_error

    return claim_error(published)


def published_rows(published: dict) -> list[dict]:
    """Every published measurement as {variant, shape, ms, speedup}, variant tables first.

    The appendix's full output repeats the tuned table, so only the CK vs Triton line adds a row.
    """
    rows = [
        {"variant": name, "shape": row["shape"], "ms": row["ms"], "speedup": row.get("speedup", {})}
        for name, variant in published["variants"].items()
        for row in variant["results"]
    ]
    extra = published.get("appendix", {}).get("ck_vs_triton")
    if extra:
        rows.append({"variant": extra["variant"], "shape": extra["shape"], "ms": extra["ms"], "speedup": {}})
    return rows


def find_published(published: dict, variant: str, shape: dict) -> dict | None:
    for row in published_rows(published):
        if row["variant"] == variant and shape_key(row["shape"]) == shape_key(shape):
            return row
    return None


def _backend(published: dict, name: str, row: dict) -> dict:
    ms = row["ms"].get(name)
    measured = ms is not None
    return backend_entry(published["labels"][name], status="ok" if measured else "unavailable",
                         reason=None if measured else NOT_PRINTED, wall_mean_ms=ms, speedup=row["speedup"].get(name))


def _provenance(published: dict) -> dict:
    keys = ("started finished host device arch driver cuda hip torch triton aiter aiter_commit "
            "runtime image image_id project_commit config_sha256 command").split()
    provenance = dict.fromkeys(keys)
    hw, sw = published["source"]["hardware"], published["source"]["software"]
    provenance.update(device=hw["device"], arch=hw["arch"], torch=sw["torch"], triton=sw["triton"], aiter=sw["aiter"])
    return provenance


def _result(published: dict, run: str, row: dict) -> dict:
    method = published["method"]
    variant = published["variants"][row["variant"]]
    return {
        "schema_version": 1,
        "run": run,
        "variant": row["variant"],
        "shape": dict(row["shape"]),
        "shape_id": shape_id(row["shape"]),
        "dtype": method["dtype"],
        "causal": method["causal"],
        "platform": published["source"]["hardware"]["platform"],
        "roles": dict(published["roles"]),
        "method": {"warmup": method["warmup"], "iters": method["iters"], "reduced": False,
                   "wall": method["wall"], "device_timer": method["device_timer"]},
        "flops": None,
        "flop_convention": None,
        "tolerance": {"max_abs_err": 0.02, "min_cosine": 0.999},
        "kernel_config": {"path": published["kernel_config_path"], "sha256": None, "values": dict(variant["triton"])},
        "backends": {name: _backend(published, name, row) for name in published["labels"]},
        "provenance": _provenance(published),
    }


def _config(published: dict, run: str) -> dict:
    method = published["method"]
    shapes = sorted({shape_key(r["shape"]): r["shape"] for r in published_rows(published)}.values(), key=shape_key)
    return {
        "run": run,
        "dtype": method["dtype"],
        "causal": method["causal"],
        "warmup": method["warmup"],
        "iters": method["iters"],
        "shapes": shapes,
        "backends": list(published["labels"]),
        "roles": {published["source"]["hardware"]["platform"]: dict(published["roles"])},
        "variants": {
            name: {"title": v["title"], "label": v["label"], "triton": dict(v["triton"])}
            for name, v in published["variants"].items()
        },
    }


def as_collected(published: dict, run: str = "published") -> tuple[dict, dict]:
    """(collected results, config) equivalent to a run that measured exactly the published numbers.

    Backends carry the published speedup in `speedup`, so the renderer prints it verbatim instead
    of recomputing it from the rounded times.
    """
    results = [_result(published, run, row) for row in published_rows(published)]
    order = list(published["variants"])
    results.sort(key=lambda r: (order.index(r["variant"]), shape_key(r["shape"])))
    return {"run": run, "results": results}, _config(published, run)
