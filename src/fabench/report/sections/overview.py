"""The report's title and opening lines, Environment Setup (what the jobs ran on, from their
provenance) and Benchmark Configuration (what was asked for, from the config).
"""

from __future__ import annotations

from fabench.analysis import claims
from fabench.analysis.identity import hardware_identity
from fabench.analysis.result_types import BackendEntry, Method, backend_dicts, cell_stats, method_of, provenance_of
from fabench.platforms import PlatformName
from fabench.report.format import md_code, md_text, value_text
from fabench.report.model import Run
from fabench.shapes import shape_key

# "gpu.<key>" reads the GPU's identity (provenance.gpu): which card, and the power limit it ran
# under; results written before it was recorded lack it, and the line is then left out.
HARDWARE_FIELDS = (("Device", "device"), ("GPU UUID", "gpu.uuid"), ("Power limit", "gpu.power_limit_w"),
                   ("Architecture", "arch"), ("Host", "host"), ("Driver", "driver"))
UNITS = {"gpu.power_limit_w": " W"}
# os, python and cudnn are extras the runner records beyond the design's list; shown when present.
SOFTWARE_FIELDS = (("OS", "os"), ("Python", "python"), ("CUDA", "cuda"), ("cuDNN", "cudnn"), ("HIP", "hip"),
                   ("PyTorch", "torch"), ("Triton", "triton"),
                   ("aiter", "aiter"), ("aiter commit", "aiter_commit"), ("Runtime", "runtime"),
                   ("Image", "image"), ("Image ID", "image_id"), ("Project commit", "project_commit"),
                   ("Config SHA-256", "config_sha256"))


def values(run: Run, key: str) -> list:
    """A provenance field's distinct recorded values; "gpu.uuid" is the uuid in provenance.gpu."""
    if not key.startswith("gpu."):
        return run.provenance_values(key)
    found = ((provenance_of(r).get("gpu") or {}).get(key[4:]) for r in run.results)
    return [v for v in dict.fromkeys(found) if v is not None]


def fields(run: Run, names) -> list[dict]:
    """The recorded provenance fields; several values mean the jobs did not all run alike."""
    found = []
    for name, key in names:
        recorded = values(run, key)
        if recorded:
            shown = [md_text(f"{v:g}{UNITS[key]}" if key in UNITS else v) for v in recorded]
            found.append({"name": name, "shown": shown, "differs": len(recorded) > 1})
    return found


def reduced(run: Run, published: dict | None) -> dict | None:
    """Jobs that ran fewer iterations than asked (the runner's CPU counts), and the counts they
    fell short of: the published method's when there is one, else the config's."""
    jobs = [method for method in map(Method.of, run.results) if method.reduced]
    if not jobs:
        return None
    reference = Method.of(published).raw if published else run.config
    return {"jobs": len(jobs), "total": len(run.results),
            "used": list(dict.fromkeys((method.warmup, method.iters) for method in jobs)),
            "warmup": reference.get("warmup"), "iters": reference.get("iters")}


def shape_lines(shapes: list[dict]) -> list[str]:
    """Shapes as the published parameter block writes them, fields aligned."""
    cells = [[f"batch={s['batch']},", f"seq={s['seq']},", f"heads={s['heads']},", f"d_k={s['head_dim']}"]
             for s in shapes]
    widths = [max(len(c[i]) for c in cells) for i in range(3)]
    return ["(" + " ".join([*(c[i].ljust(widths[i]) for i in range(3)), c[3]]) + ")," for c in cells]


def configuration(run: Run) -> dict:
    config = run.config
    shapes = config.get("shapes") or [r["shape"] for r in run.results]
    shapes = list({shape_key(s): s for s in shapes}.values())
    variants = [[md_text(v), md_text(run.title(v)),
                 md_text(", ".join(f"{k}={value_text(x)}" for k, x in run.kernel_values(v).items()))]
                for v in run.variants]
    return {
        "shape_lines": shape_lines(shapes),
        "dtype": config.get("dtype", run.first["dtype"]),
        "causal": config.get("causal", run.first["causal"]),
        # What the jobs ran, as their results record it (not the config: a CPU runs its own counts).
        "warmup": ran_values(run, "warmup"),
        "iters": ran_values(run, "iters"),
        "iters_ran": iterations_ran(run),
        "min_trial_setting": f"{run.platform.settings_key}.min_trial_ms",
        "trials": ran_values(run, "trials"),
        "repeats": ran_values(run, "repeats"),
        "seed": config.get("seed"),
        "backends": backends_that_ran(run),
        "not_run": backends_not_run(run),
        "roles": {role: md_code(name) for role, name in run.first["roles"].items()},
        "platform": md_text(run.first["platform"]),
        "tolerance": config.get("tolerance") or run.first["tolerance"],
        "variants": variants,
    }


def ran_values(run: Run, key: str) -> str | None:
    """The method's `key` as the jobs recorded it: one value, or each distinct one ("1 or 10")."""
    values = list(dict.fromkeys(method_of(r).get(key) for r in run.results if method_of(r).get(key) is not None))
    return " or ".join(str(v) for v in values) if values else None


def iterations_ran(run: Run) -> str | None:
    """The iterations the trials ran ("1 to 2"), where any trial ran more than its job's least
    (method.iters: a trial runs on until min_trial_ms); None where every trial ran just that."""
    ran = [(t.get("iters"), Method.of(r).iters) for r in run.results for b in backend_dicts(r).values()
           for t in BackendEntry.of(b).trials if t.get("iters") is not None]
    if not ran or all(n == least for n, least in ran):
        return None
    counts = sorted({n for n, _ in ran})
    return f"{counts[0]} to {counts[-1]}" if len(counts) > 1 else str(counts[0])


def backends_that_ran(run: Run) -> list[str]:
    """Backends measured (ok) in at least one job, in the results' order."""
    return [md_text(name) for name in dict.fromkeys(n for r in run.results for n, b in backend_dicts(r).items()
                                                    if b["status"] == "ok")]


def backends_not_run(run: Run) -> list[str]:
    """Backends configured but measured in no job (the Correctness section says why)."""
    ran = set(backends_that_ran(run))
    return [md_text(n) for n in dict.fromkeys(n for r in run.results for n in backend_dicts(r)) if md_text(n) not in ran]


def columns(run: Run) -> list[list[str]]:
    """Per role, the backend that filled it and what ran: kernel, package and version, compiler.

    From the results: a column whose backend ran differently between jobs lists each way.
    """
    rows = []
    for role, name in run.first["roles"].items():
        seen = [backend_dicts(r)[name].get("implementation") for r in run.results if name in backend_dicts(r)]
        ways = [dict(t) for t in dict.fromkeys(tuple(sorted(i.items())) for i in seen if i)]
        for way in ways or [None]:
            rows.append([md_text(run.label(role)), md_code(name),
                         md_text(way["kernel"]) if way else "did not run here",
                         md_text(way.get("package") or "-") if way else "-",
                         md_text(way.get("compiler") or "none: torch's prebuilt kernels") if way else "-"])
    return rows


def triton_config_reads(run: Run) -> list[dict]:
    """Per variant: the file aiter's own loader read the patched config from, whether what it returned
    is the patched entry, and the launch options this platform's Triton did not apply."""
    reads = []
    for variant in run.variants:
        records = [(r.get("kernel_config") or {}).get("aiter_loader") for r in run.of(variant)]
        loaded = [rec for rec in records if rec and rec.get("read_back") is not None]
        matches = all(rec["read_back"] == r["kernel_config"]["values"]
                      for r, rec in zip(run.of(variant), records) if rec and rec.get("read_back") is not None)
        not_applied = {}
        for result in run.of(variant):
            triton = backend_dicts(result).get(result["roles"].get("triton", ""), {})
            not_applied.update((triton.get("kernel_config") or {}).get("not_applied") or {})
        if loaded or not_applied:
            reads.append({"variant": md_text(variant), "jobs": len(loaded), "total": len(records),
                          "asked_for": md_code(loaded[0]["asked_for"]) if loaded else None,
                          "aiter": md_text(loaded[0].get("aiter")) if loaded else None, "matches": matches,
                          "not_applied": [md_text(f"{k}: {why}") for k, why in sorted(not_applied.items())]})
    return reads


# The title's columns, in the published title's order ("CK vs Triton vs Native").
TITLE_ROLES = ("vendor", "triton", "baseline")


def title_columns(run: Run) -> list[str]:
    """The labels of the backends that ran in at least one job, each once (one backend may fill two
    roles: "SDPA vs Native", not "SDPA vs SDPA vs Native"): the title names no other."""
    ran = {n for r in run.results for n, b in backend_dicts(r).items() if b["status"] == "ok"}
    roles = {}
    for role in TITLE_ROLES:
        roles.setdefault(run.first["roles"].get(role), role)
    return [md_text(run.label(role)) for name, role in roles.items() if name in ran]


def ran_differently(run: Run, name: str) -> bool:
    """Whether backend `name` ran other code in some variant than in the first, at a shape both ran."""
    for result in run.of(run.variants[0]):
        first = backend_dicts(result).get(name)
        for variant in run.variants[1:]:
            other = run.find(variant, result["shape"])
            entry = backend_dicts(other).get(name) if other else None
            if first and entry and "ok" == first["status"] == entry["status"] and not claims.same_code(first, entry):
                return True
    return False


def variants_alike(run: Run) -> dict | None:
    """When there are variants but no backend measured here ran other code in one than in another
    (their recorded implementation, config and kernel): which backends ran, whether the Triton role,
    the one that reads the variant's config, is among them, and which were measured once per shape
    (`once`: {variant, backends}, one figure shown in every table) or in every variant's jobs
    (`again`: their tables differ by the run's noise). None when a variant changed code."""
    ran = dict((n, b["label"]) for r in run.results for n, b in backend_dicts(r).items() if b["status"] == "ok")
    if len(run.variants) < 2 or not ran or any(ran_differently(run, name) for name in ran):
        return None
    triton = run.first["roles"].get("triton")
    once = [(variant, [md_text(ran[n]) for n in names if n in ran]) for variant, names in run.measured_once.items()]
    measured_once = {n for names in run.measured_once.values() for n in names}
    return {"backends": [md_text(label) for label in ran.values()],
            "once": [{"variant": md_text(run.variant_label(variant)), "backends": labels}
                     for variant, labels in once if labels],
            "again": [md_text(label) for name, label in ran.items() if name not in measured_once],
            "triton": md_text(run.label("triton")), "triton_ran": triton in ran}


def quoted_calibration(run: Run) -> dict | None:
    """The values of this report not measured in this run besides published ones: the calibration's
    between-run and between-card noise quoted under How precise is this run (where a run shows
    its precision), with the fit's name and whether it was fitted on this run's hardware."""
    if run.published or not any(b["status"] == "ok" and cell_stats(b) for _, _, b in run.ran_backends()):
        return None
    return {"fit": md_code(run.rule.fit or "none"), "here": run.rule.calibrated_on(hardware_identity(run.results))}


def context(run: Run, published: dict | None) -> dict:
    started, finished = run.provenance_values("started"), run.provenance_values("finished")
    return {
        "published": bool(published),
        "preview": bool(run.config.get("preview")),  # config.preview: a quick look, said first
        "cpu_only": run.platforms() == [PlatformName.CPU],  # a CPU run judges nothing between runs: said first
        "run": md_code(run.name),
        "platforms": md_text(", ".join(run.platforms())),
        "device": md_text(", ".join(run.provenance_values("device"))),
        "arch": md_text(", ".join(run.provenance_values("arch"))),
        "runtime": md_text(", ".join(run.provenance_values("runtime"))),
        "hardware": fields(run, HARDWARE_FIELDS),
        "software": fields(run, SOFTWARE_FIELDS),
        "period": md_text(f"{min(started)} to {max(finished)}") if started and finished else None,
        "reduced": reduced(run, published),
        "configuration": configuration(run),
        "columns": columns(run),
        "triton_config_reads": triton_config_reads(run),
        "title_columns": title_columns(run),
        "variants_alike": variants_alike(run),
        "calibration": quoted_calibration(run),
    }
