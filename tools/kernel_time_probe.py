"""The device figure's two methods on a few cells, printed side by side (under a minute on a GPU).

    PYTHONPATH=src python tools/kernel_time_probe.py [--trials 3] [--variant tuned]

For each cell, measured as a job measures it (fabench.measure.job.measure_backend with the timing
of config.yaml, then fabench.analysis as a job's result), one process: the kernels' own time per call
(CUPTI sums, the device figure), the per-call period of the back-to-back stream by events and by
CUPTI (the second method) with its tolerance and the parts it is made of, the event pairs around
each call (do_bench's quantity) and do_bench, each kernel's share, why each trial stopped; and, for
reference, one CUDA graph replay of 50 calls per call (where the call can be captured), as in
facts.md's probe. The L2 state is config.yaml's timing.clear_l2, the same for every figure.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import yaml

from fabench.analysis.entry import analyse_measured
from fabench.measure.backends import BACKENDS, Problem
from fabench.measure.job import job_settings, make_inputs, measure_backend, reference_output
from fabench.measure.timing import capture_graph

CELLS = [  # (backend, shape): facts.md's probe cells
    ("sdpa_cudnn", {"batch": 4, "seq": 512, "heads": 8, "head_dim": 256}),
    ("sdpa_flash", {"batch": 4, "seq": 512, "heads": 8, "head_dim": 256}),
    ("sdpa_cudnn", {"batch": 4, "seq": 1024, "heads": 8, "head_dim": 64}),
    ("sdpa_cudnn", {"batch": 4, "seq": 4096, "heads": 8, "head_dim": 256}),
    ("triton", {"batch": 4, "seq": 512, "heads": 8, "head_dim": 256}),
]


def graph_ms_per_call(fn, calls: int = 50) -> float | None:
    """One CUDA graph of `calls` calls, replayed 5 times: the median replay per call."""
    try:
        graph = capture_graph(lambda: [fn() for _ in range(calls)])
    except Exception:
        return None
    times = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / calls)
    return statistics.median(times)


def probe(name: str, shape: dict, config: dict, variant: str) -> None:
    job = job_settings(config, "cuda", shape)
    q, k, v = make_inputs(shape, torch.float16, 0, "cuda")
    kernel_config = config["variants"][variant]["triton"] if name == "triton" else {}
    problem = Problem(q, k, v, True, "cuda", kernel_config)
    began = time.perf_counter()
    entry = analyse_measured(measure_backend(BACKENDS[name], problem, reference_output(q, k, v, True), job), job)
    cell = f"{name} {tuple(shape.values())}"
    if entry["status"] != "ok":
        print(f"{cell}: {entry['status']}: {entry.get('reason')}")
        return
    stats, check = entry["stats"], entry["cross_check"] or {}
    second = check.get("second_method") or {}
    pairs = statistics.median(statistics.median(t["device_samples_ms"]) for t in entry["trials"])
    try:
        graph = graph_ms_per_call(BACKENDS[name].prepare(problem).fn)
    except Exception:  # the graph is for reference only
        graph = None
    print(f"{cell}  ({time.perf_counter() - began:.1f} s)")
    print(f"  kernels' own time (CUPTI sum) {entry['device_ms']['median']:.4f} ms, trials' spread "
          f"{stats['device_ms']['spread']:.2%}; event pair per call {pairs:.4f}; graph of 50 per call "
          f"{'n/a' if graph is None else f'{graph:.4f}'}; do_bench {check.get('do_bench_ms')} "
          f"({'agrees' if check.get('agrees') else check.get('reason')})")
    if second:
        parts = ", ".join(f"{k} {v:.2%}" for k, v in second["tolerance_parts"].items())
        print(f"  period by events {second['events_ms']:.4f} / by CUPTI {second['cupti_ms']:.4f} ms: "
              f"{second['difference']:.2%} apart, tolerance {second['tolerance']:.2%} ({parts}) -> "
              f"{'AGREE' if second['agrees'] else 'DIFFER'}")
    else:
        print("  no second method:", entry["observations"]["notes"])
    shares = "; ".join(f"{k['name'][:50]} {k['us_per_call']:.1f} us ({k['share']:.0%})" for k in stats.get("kernel_shares") or [])
    print(f"  kernels: {shares}")
    print("  stopped: " + ", ".join(f"{t['stop']['stopped']} after {t['stop']['samples']} (noise {t['stop']['noise']})"
                                    for t in entry["trials"] if t.get("stop")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--variant", default="tuned")
    args = parser.parse_args()
    config = yaml.safe_load(open("config.yaml"))
    config["timing"]["trials"] = args.trials
    print(f"{torch.cuda.get_device_name(0)}; L2 cleared before every call: {config['timing']['clear_l2']}")
    for name, shape in CELLS:
        try:
            probe(name, shape, config, args.variant)
        except Exception as err:  # one cell's failure is printed; the others still run
            print(f"{name} {tuple(shape.values())}: {type(err).__name__}: {err}")


if __name__ == "__main__":
    main()
