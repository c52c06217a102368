"""The analysis stage: the one place where figures and verdicts are derived from what the
measuring processes observed. Torch-free.

Measuring processes (fabench.measure) record raw observations only: every trial's figures, the
GPU's clocks around it, do_bench's and the profiler's timings of the same kernels, the kernels
launched, and notes on what went wrong. Everything derived from them comes from here:

    result_types  a result's parts as types (Result, BackendEntry, CellStats, Trial, ...), decoded
               from its JSON: the one module that reads the result's core keys by name
    stats      order statistics, spreads, Student-t quantiles, the Mann-Whitney test
    figures    which figure a cell is judged on (device time, else wall-clock), TFLOP/s
    entry      one backend of one job: medians, spread, stability, the independent cross-checks
    noise      one run: noise pooled over cells of similar duration, the CI of each cell's median
               and the prediction interval for another run on the same hardware
    components the noise model's components (within a process, between processes, runs and cards),
               each estimated from data
    calibration  the rule's fitted values per GPU model (calibrations.yaml), checked strictly
    policy     the one comparison rule (Rule, its config key `comparison`): two runs of a cell are
               changed / same / cannot tell; steps in a series of archived runs; a figure against
               a published number
    identity   what may be compared with what: code, hardware and experiment identities
    detector   how that rule behaves on archived runs (false alarms, answers, sensitivity)
    peers      asv's and nvbench's rules on the same data, for comparison
    claims     what the report may say about two cells of one run (a winner or a tie)
    legacy     reading results of schema 1 and 2 (read as they are, never migrated)

`analyse_result` derives one job's result (the merge calls it), `analyse_run` a collected run
(the collector, the comparison and the report call it); re-running either on archived raw data
gives the same figures.
"""

from fabench.analysis.entry import analyse_result  # noqa: F401
from fabench.analysis.noise import analyse_run  # noqa: F401
