"""One module per part of the report, each computing the values its template writes out.

Every module has `context(run, published) -> dict | None` (None: the part is left out) and a
template of the same name in report/sections/; fabench.report.render.SECTIONS lists them, and
report/report.md.j2 includes the templates in the report's order. A new section is a module
here, its template there, one entry in SECTIONS and one include.

    overview     title, Environment Setup, Benchmark Configuration
    results      Results (a table per variant, config notes, Key Improvements), Analysis (winners)
    limits       How close to the hardware's limit (percent of the GPU's peaks; GPU runs only)
    comparison   Published vs Reproduced
    published_claims
                 The Published Claims, Re-tested (by the comparison policy)
    correctness  Correctness
    timing       Device Timing and TFLOP/s, All measured backends
    appendix     Appendix: Full Benchmark Output

Values are numbers, booleans, and text already escaped for Markdown (fabench.report.format);
the sentences around them are the templates'.
"""
