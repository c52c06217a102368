"""The published report's numbers (report/published/*.yaml): loading and lookup. They are data
beside our runs: the config check loads them, the report and the comparison look rows up in them.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from fabench.config import config_schema, quote, schema_error, shipped_yaml
from fabench.files import DataPathError, confined_path
from fabench.results.bounds import bounds_problem
from fabench.shapes import shape_id, shape_key
from fabench.resources import SCHEMA_DIR

PUBLISHED_SCHEMA = SCHEMA_DIR / "published.schema.yaml"
# The file config.yaml names (a path in the checkout): what an unreadable file is told to look like.
EXAMPLE_NAME = "mi300x-2025-12-30.yaml"
# Where the published numbers named by a stored config (an archived or collected run's config.json)
# may lie: the project's own folder of them. A user's config names any file (the config check reads
# it); a stored one is data, and points nowhere else.
PUBLISHED_DIR = "report/published"


class PublishedError(ValueError):
    """A published-numbers file the report cannot read: the message names the file and what is
    wrong, on one line."""


def stored_published(config: dict, project: Path, source: str = "config.json") -> dict | None:
    """The published numbers a stored config names (its `published`), None when it names none: read
    only from the project's report/published/ folder, never through a symbolic link; PublishedError
    (one line naming `source`) for a path elsewhere."""
    name = config.get("published")
    if not name:
        return None
    what = f"{source} published"
    try:
        path = confined_path(project, name, what)
        folder = confined_path(project, PUBLISHED_DIR, what)
    except DataPathError as err:
        raise PublishedError(str(err)) from None
    if folder not in path.parents:
        raise PublishedError(f"{what}: {quote(name)} is not a file of {PUBLISHED_DIR}/, where a stored config's "
                             "published numbers lie")
    return load_published(path)


def load_published(path: str | Path, schema: str | Path = PUBLISHED_SCHEMA) -> dict:
    """The published numbers of `path`, checked against the schema and across keys."""
    path = Path(path)
    if not path.is_file():
        raise PublishedError(f"{path}: " + ("not a file" if path.exists() else "no such file"))
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise PublishedError(f"{path} is not a text file (expected YAML like {EXAMPLE_NAME})") from None
    except OSError as err:
        raise PublishedError(f"{path}: {err.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise PublishedError(f"{path} is not YAML: {yaml_problem(err, text)}") from None
    problem = (schema_error(data, shipped_yaml(schema)) or _number_error(data)
               or _consistency_error(data))
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


def _number_error(published: dict) -> str | None:
    """A number no measurement can be (a time of 1e308 ms, a speedup of 1e300), named as the
    schema's errors name a key (variants.default.results.0.ms.native)."""
    problem = bounds_problem(published)
    return problem.removeprefix("$.").replace("]", "").replace("[", ".") if problem else None


def known_backends() -> list[str]:
    """The backends a config may name: config.schema.yaml's enum (tests/test_config.py keeps it equal to
    fabench.measure.backends.registry.BACKENDS; read here, so that this reader needs no torch)."""
    return config_schema()["definitions"]["backend"]["enum"]


def _backend_error(published: dict) -> str | None:
    """A backend fabench does not know, named by a label or by a row's times or speedups: its
    numbers could be compared with nothing, and a misspelt name (sdpa_cudnnn) would drop silently."""
    known = known_backends()
    places = [("labels", published["labels"])]
    for name, variant in published["variants"].items():
        for index, row in enumerate(variant["results"]):
            where = f"variants.{name}.results.{index} ({shape_id(row['shape'])})"
            places += [(f"{where}.ms", row["ms"]), (f"{where}.speedup", row.get("speedup") or {})]
    appendix = published.get("appendix") or {}
    for index, row in enumerate((appendix.get("full_benchmark_output") or {}).get("results") or []):
        where = f"appendix.full_benchmark_output.results.{index} ({shape_id(row['shape'])})"
        places += [(f"{where}.ms", row["ms"]), (f"{where}.speedup", row.get("speedup") or {})]
    if appendix.get("ck_vs_triton"):
        places.append(("appendix.ck_vs_triton.ms", appendix["ck_vs_triton"]["ms"]))
    for where, by_backend in places:
        unknown = [name for name in by_backend if name not in known]
        if unknown:
            return f"{where}: {unknown[0]!r} is not a backend fabench knows ({', '.join(known)})"
    return None


def _consistency_error(published: dict) -> str | None:
    """What the schema cannot say: every role and the appendix name a listed backend and variant."""
    problem = _backend_error(published)
    if problem:
        return problem
    for role, name in published["roles"].items():
        if name not in published["labels"]:
            return f"roles.{role}: {name!r} has no entry in labels ({', '.join(published['labels'])})"
    extra = published.get("appendix", {}).get("ck_vs_triton")
    if extra and extra["variant"] not in published["variants"]:
        return (f"appendix.ck_vs_triton.variant: {extra['variant']!r} is not one of the variants "
                f"({', '.join(published['variants'])})")
    return claim_error(published)


def claim_error(published: dict) -> str | None:
    """What the schema cannot say about the claims: unique ids, one form each, variants the file lists."""
    seen = set()
    for index, claim in enumerate(published.get("claims") or []):
        where = f"claims[{index}] ({claim['id']})"
        if claim["id"] in seen:
            return f"{where}: the id is used twice"
        seen.add(claim["id"])
        forms = [form for form in (("faster", "slower"), ("same",)) if any(key in claim for key in form)]
        if len(forms) != 1 or not all(key in claim for key in forms[0]):
            return f"{where}: give either faster and slower (one cell claimed faster) or same (two cells), not {_keys(claim)}"
        for cell in claim_cells(claim):
            if cell["variant"] not in published["variants"]:
                return (f"{where}: variant {cell['variant']!r} is not one of the variants "
                        f"({', '.join(published['variants'])})")
    return None


def _keys(claim: dict) -> str:
    given = [key for key in ("faster", "slower", "same") if key in claim]
    return " and ".join(given) if given else "neither"


def claim_cells(claim: dict) -> list[dict]:
    """The claim's two cells: (faster, slower) or the two that take the same time."""
    return claim["same"] if "same" in claim else [claim["faster"], claim["slower"]]


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
