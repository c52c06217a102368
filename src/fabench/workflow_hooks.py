"""What the workflow does to the machine as it starts and ends, apart from the plan, which only
decides (fabench.plan): the Snakefile's onstart (the Docker engine asked, the workflow's start
recorded) and its onsuccess and onerror (the measuring workers told to
stop). workflow/rules/common.smk builds one WorkflowHooks of its Plan (fabench.plan.Plan, whose
answers the hooks act on: nothing here imports the planner); the hooks print what they have to say
and never fail the workflow but by the engine check, before any job.
"""

from __future__ import annotations

import os
from pathlib import Path

from fabench.container import image as container_image
from fabench.files import write_json
from fabench.measure.launch.worker_client import WORKER_DIR_ENV, stop_workers
from fabench.places import check_env_places
from fabench.watchdog import WORKFLOW_ENV

# When this Snakemake started (its Snakefile parsed), written once the workflow runs (Snakefile
# onstart), so that the report can say how long the whole run took, from Snakemake's start.
WORKFLOW_STARTED = Path(".snakemake") / "fabench-workflow-started.json"
# The rules whose jobs talk to the Docker engine when the runtime is docker.
ENGINE_RULES = frozenset({"build_image", "patch_config", "measure"})


class WorkflowHooks:
    """The workflow's actions on the machine, for a plan; `cluster`: whether the jobs are submitted to a
    cluster executor (fabench.plan.submits_jobs)."""

    def __init__(self, plan, cluster: bool):
        self.plan, self.cluster = plan, cluster
        self._engine_asked = False  # engine_warning asks the engine once per Snakemake

    def record_start(self) -> None:
        """When this Snakemake started, for the report's time line (written once the workflow runs)."""
        write_json(WORKFLOW_STARTED, {"started_at": self.plan.started_at, "pid": os.getpid()})

    # --- the Docker engine --------------------------------------------------------------------------
    def engine_problem(self, timeout: float = 10) -> str | None:
        """In the docker runtime, the one line saying that no engine answers, where it looked and
        how to point at one; None when one answers or the runtime is local."""
        if not self.plan.docker:
            return None
        try:
            container_image.client(timeout=timeout).close()
        except container_image.NoEngineError as err:
            return f"runtime docker: {err}"
        return None

    def engine_warning(self, manifest: str) -> str | None:
        """In the docker runtime, the warning that no engine answers, for a dry run too: asked once,
        by the jobs of an image still to be built (the `manifest` its build writes), never on
        parsing the Snakefile; a run with the image built asks only at its start (engine_problem_for)."""
        if not self.plan.docker or self._engine_asked or Path(manifest).is_file():
            return None
        self._engine_asked = True
        problem = self.engine_problem(timeout=5)
        return f"warning: {problem}" if problem else None

    def engine_problem_for(self, rule_names) -> str | None:
        """The line that stops a docker run whose engine does not answer before its first job (the
        Snakefile's onstart raises it); None for a run with nothing for the engine to do (archive,
        compare, a finished run), which needs none."""
        return self.engine_problem() if ENGINE_RULES & set(rule_names) else None

    # --- the measuring workers ---------------------------------------------------------------------
    def stop_measuring_workers(self) -> str | None:
        """At the workflow's end, its measuring workers end at once instead of when idle. Called by
        the Snakefile's handlers, which must not fail themselves: a workers' folder that cannot be
        used gives one line to print (the workers end when idle anyway)."""
        if self.plan.measure_mode(self.cluster) != "worker":
            return None
        unusable = [problem for problem in check_env_places(os.environ) if WORKER_DIR_ENV in problem]
        if unusable:  # stop_workers would find no worker there: say why, once
            return f"note: the measuring workers were not told to stop: {unusable[0]}; they end when idle"
        spare_s = self.plan.spare_worker_s(self.cluster)
        try:
            stopped = stop_workers(os.environ[WORKFLOW_ENV], spare_s=spare_s)
        except OSError as err:
            return (f"note: the measuring workers were not told to stop ({err}); they end when idle. "
                    f"Check {WORKER_DIR_ENV} (or XDG_RUNTIME_DIR)")
        if stopped and spare_s:  # processes that outlive the workflow: said where the user looks
            return (f"note: {len(stopped)} spare measuring worker(s) wait up to {spare_s:g} s for the next run "
                    f"of this checkout, which adopts them instead of starting its own (measure.spare_worker_s: "
                    f"0 leaves none; docs/worker.md)")
        return None
