"""The run a report describes: the collected results and the config, indexed the ways the
sections ask for them.

Variants come in the config's order, which is the user's: the first is the reference (the state
before any change) and the last is the one compared with it. Variants that only the results
name go last. Everything here is raw data; the sections escape text where it enters Markdown.
"""

from __future__ import annotations

import json
import time
from typing import Iterator

from fabench.analysis import claims
from fabench.analysis.identity import hardware_identity
from fabench.analysis.policy import Rule
from fabench.analysis.result_types import backend_dicts, provenance_of
from fabench.platforms import PlatformName
from fabench.results.shared import measured_once, shown
from fabench.side_files import COMPILE_AHEAD, side_value_problem
from fabench.shapes import main_head_dim, shape_key, shape_text

ROLES = ("baseline", "vendor", "triton")
# (B,S,H,D) in order, each with the word a short shape name uses for it.
DIM_WORDS = (("batch", "batch"), ("seq", "seq"), ("heads", "heads"), ("head_dim", "d_k"))
# Statuses of a backend that ran, cleanly or not; "unavailable" ones never started.
RAN = ("ok", "failed")


def measured_ms(backend: dict | None) -> float | None:
    """Wall mean of a backend that ran cleanly; anything else has no time to compare."""
    if backend is None or backend["status"] != "ok":
        return None
    return backend["wall_mean_ms"]


def role_backend(result: dict, role: str) -> dict | None:
    return backend_dicts(result).get(result["roles"][role])


def role_ms(result: dict | None, role: str) -> float | None:
    return None if result is None else measured_ms(role_backend(result, role))


def speedup(result: dict, role: str) -> float | None:
    """Baseline time over this role's time, unless the data states the speedup itself."""
    backend = role_backend(result, role)
    if backend is not None and backend.get("speedup") is not None:
        return backend["speedup"]
    base, mine = measured_ms(role_backend(result, "baseline")), measured_ms(backend)
    return base / mine if base is not None and mine else None


def differing_keys(values: list[dict]) -> list[str]:
    """Keys whose values differ between variants; with one variant, all of them."""
    keys = list(dict.fromkeys(k for v in values for k in v))
    if len(values) < 2:
        return keys
    return [k for k in keys if len({json.dumps(v.get(k, "unset")) for v in values}) > 1]


class ShapeNames:
    """Short shape names ("seq=512"): only the dimensions that tell the shapes apart.

    The main shapes (those with the main head_dim) are named by the dimensions that vary among
    them; any other shape also names every dimension where it departs from them ("d_k=64").
    """

    def __init__(self, shapes: list[dict], main_head_dim: int):
        main = [s for s in shapes if s["head_dim"] == main_head_dim]
        self.common = {dim: main[0][dim] for dim, _ in DIM_WORDS if len({s[dim] for s in main}) == 1}

    def __call__(self, shape: dict) -> str:
        parts = [f"{word}={shape[dim]}" for dim, word in DIM_WORDS
                 if self.common.get(dim, object()) != shape[dim]]
        return ", ".join(parts) or shape_text(shape)


class Run:
    """The collected results and the config, indexed the ways the sections need."""

    def __init__(self, collected: dict, config: dict, sweep: dict | None = None, started_at: float | None = None):
        self.started_at = started_at  # when the workflow that renders this report started (epoch s), if known
        # When this report is rendered (epoch s), read once so that every part states one time.
        self.rendered_at = time.time() if started_at else None
        if not collected.get("results"):
            raise ValueError("nothing to report: the collected run has no results")
        # Backends measured once per shape: {measuring variant: names}, then shown in every table.
        self.measured_once = measured_once(collected)
        collected = shown(collected)
        self.name = collected.get("run") or config.get("run")
        self.config = config
        # The comparison policy's rule every claim of the report follows, with the fitted values of
        # the hardware the run measured (calibrations.yaml).
        self.rule = Rule.of(config, hardware_identity(collected["results"]))
        # A publication's numbers recast as a run (tests/support/published_run.py): no job of it ever started.
        self.published = all(provenance_of(r).get("started") is None for r in collected["results"])
        self.sweep = sweep  # the tuning sweep's record (fabench.tune.pick), or None
        # The kernels compiled ahead of the measuring processes (fabench.measure.launch.precompile), or None.
        # Checked again: a results.json read back (an archived run's) holds it as it was written.
        ahead = collected.get("compile_ahead")
        self.compile_ahead = ahead if ahead and not side_value_problem(ahead, COMPILE_AHEAD) else None
        shapes = sorted({shape_key(r["shape"]): r["shape"] for r in collected["results"]}.values(), key=shape_key)
        self.main_head_dim = main_head_dim(shapes)
        self.shape_name = ShapeNames(shapes, self.main_head_dim)
        self.variants = self._variant_order(collected["results"])
        self.results = sorted(collected["results"], key=self._order)
        self.first = self.results[0]
        self.within = claims.WithinRun(self.results, self.rule, self.published)  # every claim of the report

    def _variant_order(self, results: list[dict]) -> list[str]:
        """The config's order; a variant with results but not in the config goes last."""
        present = [r["variant"] for r in results]
        order = [v for v in self.config.get("variants", {}) if v in present]
        return order + [v for v in dict.fromkeys(present) if v not in order]

    def _order(self, result: dict) -> tuple:
        """Variant order; the main head_dim first, other head dims ascending; (B,S,H,D) within."""
        shape = result["shape"]
        main = shape["head_dim"] == self.main_head_dim
        return self.variants.index(result["variant"]), not main, shape["head_dim"], shape_key(shape)

    def claim(self, a: dict | None, b: dict | None, names: tuple[str, str]) -> dict:
        """The policy's claim on two cells of this run (fabench.analysis.claims.WithinRun): paired
        where both are backends of one job (interleaved trial by trial in its processes)."""
        return self.within.claim(a, b, names=names)

    def role_claim(self, result: dict, first: str, second: str) -> dict:
        """The policy's claim on two roles' cells of one job (a = first, b = second), named by label."""
        entries = [role_backend(result, role) for role in (first, second)]
        names = tuple((e or {}).get("label") or result["roles"][role] for role, e in zip((first, second), entries))
        return self.claim(*entries, names=names)

    def of(self, variant: str) -> list[dict]:
        return [r for r in self.results if r["variant"] == variant]

    def find(self, variant: str, shape: dict) -> dict | None:
        return next((r for r in self.of(variant) if shape_key(r["shape"]) == shape_key(shape)), None)

    def _variant_config(self, variant: str) -> dict:
        return self.config.get("variants", {}).get(variant, {})

    def title(self, variant: str) -> str:
        return self._variant_config(variant).get("title") or variant

    def heading(self, variant: str) -> str:
        """The title of the variant's table, its key added where another variant has the same title:
        two tables under one heading could not be told apart, nor linked to one by one."""
        title = self.title(variant)
        twins = [v for v in self.variants if self.title(v) == title]
        return title if len(twins) == 1 else f"{title} ({variant})"

    def variant_label(self, variant: str) -> str:
        return self._variant_config(variant).get("label") or variant

    def head_dim_groups(self, variant: str) -> list[tuple[int, list[dict]]]:
        """Results grouped by head_dim, the main head_dim first, then ascending."""
        dims = dict.fromkeys(r["shape"]["head_dim"] for r in self.of(variant))
        return [(d, [r for r in self.of(variant) if r["shape"]["head_dim"] == d]) for d in dims]

    def label(self, role: str) -> str:
        """A column's label: the label of the backend that filled the role on this platform."""
        for result in self.results:
            backend = role_backend(result, role)
            if backend:
                return backend["label"]
        return self.first["roles"][role]

    def provenance_values(self, key: str) -> list:
        values = (provenance_of(r).get(key) for r in self.results)
        return [v for v in dict.fromkeys(values) if v is not None]

    @property
    def platform(self) -> PlatformName:
        """The platform of the run's first result, the one the report speaks of."""
        return PlatformName.parse(self.first["platform"])

    def platforms(self) -> list[str]:
        return list(dict.fromkeys(r["platform"] for r in self.results))

    def backends(self) -> Iterator[tuple[dict, str, dict]]:
        """(result, backend name, backend) for every backend of every job."""
        for result in self.results:
            for name, backend in backend_dicts(result).items():
                yield result, name, backend

    def ran_backends(self) -> Iterator[tuple[dict, str, dict]]:
        """Backends that ran (cleanly or not), each measured cell once (a backend measured once per
        shape is listed under the variant that measured it, not its copies); unavailable ones are
        summarised once instead."""
        return ((r, n, b) for r, n, b in self.backends() if b["status"] in RAN and not b.get("measured_in"))

    def kernel_values(self, variant: str) -> dict:
        """The Triton-role config as measured (the result's kernel_config), else as configured."""
        for result in self.of(variant):
            if (result.get("kernel_config") or {}).get("values"):
                return result["kernel_config"]["values"]
        return self._variant_config(variant).get("triton") or {}

    def changed_keys(self) -> list[str]:
        """The Triton config keys the variants differ in (all keys when there is one variant)."""
        return differing_keys([self.kernel_values(v) for v in self.variants])
