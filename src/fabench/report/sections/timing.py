"""Device Timing and TFLOP/s for the three report columns, and All measured backends: every
backend the jobs ran. Device columns appear only where some job had a device timer (not a CPU).
"""

from __future__ import annotations

from fabench.analysis.figures import run_metric, shown_figure
from fabench.analysis.kernel_check import JUDGE_BOUND
from fabench.analysis.noise import interval_name
from fabench.analysis.result_types import CrossCheck, cell_stats, method_of
from fabench.analysis.stats import TRIAL_FIGURE_TEXT
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
    stats = cell_stats(backend)
    if not stats:
        return "n/a"
    return "yes" if stats.stable else f"**no**: {md_text(stats.unstable_reason or 'no reason given')}"


def cross_check_text(backend: dict) -> str:
    """do_bench's median beside ours: agrees, disagrees, or why it could not judge."""
    check = backend.get("cross_check") or {}
    if check.get("do_bench_ms") is None:
        return md_text(check.get("reason") or "n/a")
    verdict = {True: "agrees", False: "**differs**", None: md_text(check.get("reason") or "not judged")}
    return f"{fmt_ms(check['do_bench_ms'])} ({verdict[check.get('agrees')]})"


def period_text(backend: dict) -> str:
    """The per-call period of the back-to-back stream (events), beside the kernels' own time."""
    stats = cell_stats(backend)
    period = stats.metric("period_ms") if stats else None
    return fmt_ms(period.median if period else None)


def second_method_text(backend: dict) -> str:
    """The period by events against the period by CUPTI: agrees or differs, within which tolerance."""
    check = (backend.get("cross_check") or {}).get("second_method")
    if not check:
        return "n/a"
    verdict = "agrees" if check["agrees"] else "**differs**"
    return f"{verdict}: {check['difference']:.1%} apart, tolerance {check['tolerance']:.1%}"


def kernels_text(backend: dict) -> str:
    """The kernels one call launches and each one's share of the call's kernel time."""
    stats = cell_stats(backend)
    shares = (stats.raw.get("kernel_shares") if stats else None) or []
    return "; ".join(f"{md_text(k['name'][:60])} {k['share']:.0%}" for k in shares) or "n/a"


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
                        spread_text(summary), stable_text(backend), period_text(backend),
                        second_method_text(backend), fmt_ms(backend.get("host_overhead_ms")),
                        cross_check_text(backend), fmt_sig(tflops(result, backend, "device_median")),
                        fmt_sig(tflops(result, backend, "wall")), kernels_text(backend)]
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


def stopping_text(rule: dict | None) -> str | None:
    if not rule:
        return None
    return (f"samples until their relative noise is at most {rule['max_noise']:.1%}, with at least "
            f"{rule['min_samples']} samples and {rule['min_trial_ms']:g} ms of kernel time (or "
            f"{rule.get('min_time_share', 1.0):.0%} of the timeout in host time), or {rule['max_trial_ms']:g} ms")


def check_counts(run: Run, check: str) -> dict | None:
    """Of the ok cells with a device figure: how many one independent check (`second_method`, the
    period by two clocks; `kernel_time`, the kernels' own time by graphs) judged, how many agreed,
    and the reasons of those that did not agree or could not be judged."""
    cells = [b for _, _, b in run.ran_backends()
             if b["status"] == "ok" and (b.get("device_ms") or {}).get("median") is not None]
    verdicts = [CrossCheck.of(c, check) for c in cells]
    judged = [v for v in verdicts if v.agrees is not None]
    if not judged:
        return None
    return {"cells": len(cells), "judged": len(judged), "agreeing": sum(1 for v in judged if v.agrees),
            "method": joined(v.method for v in verdicts), "bound": JUDGE_BOUND}


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
        "device_timer": joined(method_of(r).get("device_timer") for r in run.results),
        # What the device figure and the period are, in the measuring code's words (absent in results
        # from before the kernels' own time was the figure: the device figure was the event pairs then).
        "device_figure": joined(method_of(r).get("device_figure") for r in run.results),
        "trial_figure": TRIAL_FIGURE_TEXT,
        "period": joined(method_of(r).get("period") for r in run.results),
        "stopping": joined(stopping_text(method_of(r).get("stopping")) for r in run.results),
        "clear_l2": joined("cleared before every call" if method_of(r).get("clear_l2") else "not cleared"
                           for r in run.results),
        "platforms": joined(run.platforms()),
        "wall_method": joined(method_of(r)["wall"] for r in run.results),
        # Published numbers recast as results record no convention: the runner's is the contract's.
        "flop_convention": joined(r.get("flop_convention") for r in run.results) or md_text(FLOP_CONVENTION),
        "second_method": check_counts(run, "second_method") if device else None,
        "kernel_time": check_counts(run, "kernel_time") if device else None,
        "rows": role_rows(run, device),
        "all_rows": all_backend_rows(run, device),
    }
