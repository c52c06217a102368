"""python -m fabench.container run-job: one benchmark job in a container of the benchmark image.

    python -m fabench.container run-job --manifest build/images/<tag>.json \\
        --aiter-config results/<run>/aiter-config/<variant>.json --results-dir results/<run> \\
        [--cache-dir DIR] [--log LOG] -- <runner args...>

Inside the container: ``python3 -m fabench.measure <runner args> --aiter-config <mounted config>``.
The only command line of this package: the workflow builds the image and patches the config by
calling fabench.container.image.build_image and fabench.container.aiter_image.patch_from_image.

Exit status: the job's 0; 1 when the job or the engine failed; 2 for bad arguments; 130 when
stopped (SIGTERM, Ctrl-C, or the workflow named in FABENCH_WORKFLOW gone), its container removed.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from fabench.container.image import ContainerError
from fabench.container.job import RUNNER_MODULE, Terminated, run_job, sigterm_raises
from fabench.measure.launch.devices import DeviceError
from fabench.watchdog import watch_workflow


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m fabench.container", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run-job", help="run one benchmark job in the image")
    r.add_argument("--manifest", required=True, type=Path)
    r.add_argument("--aiter-config", required=True, type=Path)
    r.add_argument("--results-dir", required=True, type=Path)
    r.add_argument("--log", type=Path, help="append the container's output here (default: stdout)")
    r.add_argument("--cache-dir", type=Path, help="host dir for Triton/aiter caches "
                   "(default: build/container-cache/<image id>)")
    r.add_argument("--module", default=RUNNER_MODULE, help=argparse.SUPPRESS)  # tests: a probe module
    r.add_argument("runner_args", nargs=argparse.REMAINDER, help="-- then the runner's arguments")
    return p


def _watch_workflow() -> None:
    """Stop this job (SIGTERM to itself, hence clean-up) when the workflow that started it is gone.

    Python runs signal handlers in the main thread only, and only a signal delivered to that
    thread interrupts its blocking read of the container's output. Linux prefers the main thread
    already; the watchdog's thread is started with SIGTERM blocked (threads inherit the mask) so
    that the signal can never land on it.
    """
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        watch_workflow()
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


def _run_job(a: argparse.Namespace) -> int:
    args = a.runner_args[1:] if a.runner_args[:1] == ["--"] else a.runner_args
    return run_job(a.manifest, a.aiter_config, a.results_dir, args, a.log, a.cache_dir, module=a.module)


def main(argv: list[str] | None = None) -> int:
    a = _parser().parse_args(argv)
    try:
        with sigterm_raises():  # from here on SIGTERM means clean-up, not sudden death
            _watch_workflow()
            return _run_job(a)
    except ContainerError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except DeviceError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, Terminated):
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # the engine's own errors (no engine, image gone, ...)
        import docker.errors

        if isinstance(e, docker.errors.DockerException):
            print(f"error: docker: {e}", file=sys.stderr)
            return 1
        raise


if __name__ == "__main__":
    sys.exit(main())
