"""A tuning sweep of aiter's Triton MHA forward config on this host (`snakemake --cores 1 tune`).

space.py: the candidates of each stage (exhaustive, or coarse then refine). memory.py: the
shared-memory / LDS model that prunes a candidate before it is compiled. objective.py: speedup
over the reference variant per shape, the score over shapes, the ranking. job.py: one sweep job
(one stage, one shape, one process) timing its candidates with the benchmark's measuring code.
pick.py: the host step that shortlists, picks the winner and writes it as aiter's config and as a
variant of the experiment.
"""
