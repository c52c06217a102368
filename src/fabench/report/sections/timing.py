"""Device Timing and TFLOP/s for the three report columns, and All measured backends: every
backend the jobs ran. Device columns appear only where some job had a device timer (not a CPU).
"""

from __future__ import annotations

from fabench.analysis.figures import run_metric, shown_figure
from fabench.analysis.noise import interval_name
from fabench.report.format import backend_name, fmt_ms, fmt_sig, md_text, shape_text, status_text
from fabench.report.model import RAN, ROLES, Run, role_backend
from fabench.results.contract import FLOP_CONVENTION


def tflops(result: dict, backend: dict, kind: str) -> float | None:
    """Recorded TFLOP/s, else derived from the job's FLOP count and the time."""
    recorded = (backend.get("tflops") or {}).get(kind)
    if recorded is not None:
        return recorded
    ms = backend.get("wall_mean_ms") if kind == "wall" else (backend.get("device_ms") or {}).get("median")
    return result["flops"] / (ms * 1e9) if result.get("flops") and ms else None


def ci_text(summary: dict) -> str:
    ci = summary.get("ci95")
    return f"{fmt_ms(ci[0])} to {fmt_ms(ci[1])}" if ci else "n/a"


def spread_text(summary: dict) -> str:
    return "n/a" if summary.get("spread") is None else f"{summary['spread'] * 100:.1f}%"


def stable_text(backend: dict) -> str:
    stats = backend.get("stats")
    if not stats:
        return "n/a"
    return "yes" if stats.get("stable") else f"**no**: {md_text(stats.get('unstable_reason') or 'no reason given')}"


def cross_check_text(backend: dict) -> str:
    """do_bench's median beside ours: agrees, disagrees, or why it could not judge."""
    check = backend.get("cross_check") or {}
    if check.get("do_bench_ms") is None:
        return md_text(check.get("reason") or "n/a")
    verdict = {True: "agrees", False: "**differs**", None: md_text(check.get("reason") or "not judged")}
    return f"{fmt_ms(check['do_bench_ms'])} ({verdict[check.get('agrees')]})"


def role_rows(run: Run, device: bool) -> list[list[str]]:
    """The three report columns' backends that ran: the published method's figure, the trials'
    median with its 95% CI, spread and verdict, the host overhead and do_bench beside it."""
    rows = []
    for result in run.results:
        for role in ROLES:
            backend = role_backend(result, role)
            if backend is None or backend["status"] not in RAN:
                continue
            summary = shown_figure(backend, "device_ms" if device else "wall_mean_ms")
            row = [md_text(run.variant_label(result["variant"])), shape_text(result["shape"]),
                   backend_name(result["roles"][role], backend), fmt_ms(backend.get("wall_mean_ms"))]
            if device:
                row += [fmt_ms((backend.get("device_ms") or {}).get("median")), ci_text(summary),
                        spread_text(summary), stable_text(backend), fmt_ms(backend.get("host_overhead_ms")),
                        cross_check_text(backend), fmt_sig(tflops(result, backend, "device_median")),
                        fmt_sig(tflops(result, backend, "wall"))]
            else:
                row += [ci_text(summary), spread_text(summary), stable_text(backend),
                        fmt_sig(tflops(result, backend, "wall"))]
            rows.append(row)
    return rows


def all_backend_rows(run: Run, device: bool) -> list[list[str]]:
    rows = []
    for result, name, backend in run.ran_backends():
        row = [md_text(run.variant_label(result["variant"])), shape_text(result["shape"]),
               backend_name(name, backend), status_text(backend), fmt_ms(backend.get("wall_mean_ms"))]
        if device:
            row += [fmt_ms((backend.get("device_ms") or {}).get("median")),
                    fmt_sig(tflops(result, backend, "device_median"))]
        else:
            row.append(fmt_sig(tflops(result, backend, "wall")))
        rows.append(row + [md_text(backend.get("reason") or "")])
    return rows


def joined(values) -> str:
    """Distinct values in order of appearance, escaped, comma-separated ("" when none)."""
    return ", ".join(md_text(v) for v in dict.fromkeys(v for v in values if v))


def interval_names(run: Run, device: bool) -> list[str]:
    """What the tables' intervals are, in words (a CPU run's come from one process's trials)."""
    metric = "device_ms" if device else "wall_mean_ms"
    return list(dict.fromkeys(interval_name(shown_figure(b, metric)) for _, _, b in run.ran_backends()
                              if b["status"] == "ok" and shown_figure(b, metric)))


def context(run: Run, published: dict | None) -> dict:
    device = run_metric(run.results) == "device_ms"
    names = interval_names(run, device)
    return {
        "intervals": [md_text(n) for n in names],
        # "95% CI" only where every interval is one over processes; otherwise named in the text.
        "interval_header": "95% CI (ms)" if names and all("processes" in n for n in names) else "Interval (ms)",
        "device": device,
        "device_timer": joined(r["method"].get("device_timer") for r in run.results),
        "platforms": joined(run.platforms()),
        "wall_method": joined(r["method"]["wall"] for r in run.results),
        # Published numbers recast as results record no convention: the runner's is the contract's.
        "flop_convention": joined(r.get("flop_convention") for r in run.results) or md_text(FLOP_CONVENTION),
        "rows": role_rows(run, device),
        "all_rows": all_backend_rows(run, device),
    }
