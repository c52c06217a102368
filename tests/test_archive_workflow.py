"""`snakemake archive`, `snakemake compare` and `snakemake --report` on real CPU runs, and the
HTML report opened in a real headless Chromium."""

import base64
import json
import os
import re
import shutil
import signal
import subprocess
import sys

import pytest

from fabench.results.archive_read import verify_entry
from fabench.results.unarchived import STORE_COMMAND
from workflow_util import SNAKEFILE, snakemake, tiny_config, write_config

pytestmark = pytest.mark.slow

# Snakemake's own last lines, after the workflow's (Snakefile onsuccess)
SNAKEMAKES_LAST = ("Complete log", "Elapsed time")
SHAPE = {"batch": 1, "seq": 64, "heads": 2, "head_dim": 32}


def run_config(run: str, label: str) -> dict:
    return tiny_config(run=run, shapes=[SHAPE], archive={"root": "archive", "label": label})


@pytest.fixture(scope="module")
def archived_steps(tmp_path_factory):
    """Two real runs of the CPU test experiment under two version labels, as a new user makes them:
    tiny-a by the report target alone, then `compare` and `archive` with tiny-b's config, which do
    not name tiny-a; `compare` again. The work folder and each step's process."""
    work = tmp_path_factory.mktemp("archive-work")
    steps = {"report tiny-a": snakemake(work, "--cores", "1", "report", config=run_config("tiny-a", "cpu-a"))}
    for step in ("compare", "archive", "compare again"):
        steps[step] = snakemake(work, "--cores", "1", step.split()[0], config=run_config("tiny-b", "cpu-b"))
    for step, proc in steps.items():
        assert proc.returncode == 0, step + ": " + proc.stdout[-3000:] + proc.stderr[-3000:]
    return work, steps


@pytest.fixture(scope="module")
def archived(archived_steps):
    return archived_steps[0]


def test_archive_stores_every_finished_run_and_compare_names_one_it_does_not_hold(archived_steps):
    work, steps = archived_steps
    pending = f"results/tiny-a is a finished run not in archive: `{STORE_COMMAND}` stores it"
    assert pending in steps["compare"].stderr
    assert "## Finished runs not in the archive" not in (work / "compare" / "compare.md").read_text()
    assert re.search(r"results/tiny-a: archived as archive/cpu-a/0001-[0-9a-f]{8}", steps["archive"].stderr)
    # Each command ends with its result in one line and the path to read it in full (issue 40).
    last = {step: [line for line in proc.stderr.splitlines() if not line.startswith(SNAKEMAKES_LAST)][-1]
            for step, proc in steps.items()}
    assert re.fullmatch(r"run tiny-a: 2 jobs, cells \d+ ok, .*; fastest by its median: \w+ at \d+ of \d+ shapes in \S+ table, "
                        r"[01] judged ahead beyond the noise; decided \d+ of \d+ questions; "
                        r"report: results/tiny-a/report.md \(results/tiny-a/report.html\)", last["report tiny-a"]), last
    assert last["compare"] == ("compare: 1 archived run: nothing to compare it with yet; "
                               "see compare/compare.md (compare/compare.html)"), last
    assert re.fullmatch(r"compare: 2 archived runs; cpu-b/0001-\w+ against cpu-a/0001-\w+: \d+ cells judged: .*; "
                        r"see compare/compare.md \(compare/compare.html\)", last["compare again"]), last
    # the config's own run is named on the terminal too, and the last line names both (issue 40)
    # (stored by the first compare, which compares only what is archived)
    assert re.search(r"results/tiny-b: archived as archive/cpu-b/0001-[0-9a-f]{8}", steps["compare"].stderr)
    assert re.search(r"archive: this config's run\(s\) in the archive: results/tiny-b as cpu-b/0001-[0-9a-f]{8}; "
                     r"1 other finished run\(s\) archived, 0 not", steps["archive"].stderr)
    assert pending not in steps["compare again"].stderr
    entries = json.loads((work / "compare" / "compare.json").read_text())["entries"]
    assert [e["label"] for e in entries] == ["cpu-a", "cpu-b"], {k: p.stderr[-4000:] for k, p in steps.items() if k != "report tiny-a"}


def test_a_finished_run_the_archive_cannot_take_is_named_with_why_and_fails_nothing(archived, tmp_path):
    work = copy_of(archived, tmp_path)
    receipt = work / "results" / "tiny-a" / "archived.json"
    shutil.rmtree(work / json.loads(receipt.read_text())["path"])  # no longer archived
    next((work / "results" / "tiny-a" / "tuned").glob("*.json")).unlink()  # and no longer whole
    proc = snakemake(work, "--cores", "1", "archive", config=run_config("tiny-b", "cpu-b"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "results/tiny-a not archived: results/tiny-a is not a finished run: 1 job result file(s) missing" in proc.stderr
    assert "0 other finished run(s) archived, 1 not" in proc.stderr
    assert not list((work / "archive" / "cpu-a").glob("0*"))


def test_each_run_is_one_intact_entry_under_its_label(archived):
    for run, label in (("tiny-a", "cpu-a"), ("tiny-b", "cpu-b")):
        receipt = json.loads((archived / "results" / run / "archived.json").read_text())
        entry = archived / receipt["path"]
        assert entry.parent.name == label and re.fullmatch(r"\d{4}-[0-9a-f]{8}", entry.name)
        assert verify_entry(entry) == []
        stored = {p.relative_to(entry).as_posix() for p in entry.rglob("*") if p.is_file()}
        assert {"results.json", "report.md", "config.json", "SHA256SUMS", "record.json",
                "plots/latency.png", "plots/speedup.png", "aiter-config/tuned.json"} <= stored


def test_the_comparison_has_a_row_per_measured_cell_of_both_entries(archived):
    comparison = json.loads((archived / "compare" / "compare.json").read_text())
    assert [e["label"] for e in comparison["entries"]] == ["cpu-a", "cpu-b"]
    cells = {(row["variant"], row["shape_id"], row["backend"]) for row in comparison["rows"]}
    # Native and SDPA read no variant config: measured once per shape, in the first variant's jobs.
    assert {("default", "b1-s64-h2-d32", b) for b in ("native", "sdpa")} <= cells
    assert not {("tuned", "b1-s64-h2-d32", b) for b in ("native", "sdpa")} & cells
    markdown = (archived / "compare" / "compare.md").read_text()
    # A figure per variant with a measured cell: on a CPU the tuned jobs measure none (FlexAttention left out).
    assert "cpu-a" in markdown and "cpu-b" in markdown and "](plots/versions-default.png)" in markdown
    assert "versions-tuned.png" not in markdown
    # The workflow applies the comparison policy's default rule, as `fabench compare` does; two CPU
    # runs on one host are the same card, never "other hardware".
    from fabench.analysis.policy import Rule, same_card

    assert comparison["rule"]["margin"] == Rule.of({}).margin
    assert same_card(*(e["hardware"] for e in comparison["entries"]))
    assert not [f for f in comparison["flags"] if f["code"] == "other_hardware"]


def test_archiving_again_adds_nothing_and_a_new_run_gets_a_new_id(archived):
    again = snakemake(archived, "--cores", "1", "archive", config=run_config("tiny-b", "cpu-b"))
    assert again.returncode == 0, again.stderr[-3000:]
    assert "0 other finished run(s) archived, 0 not" in again.stderr
    assert [len(list((archived / "archive" / label).glob("0*"))) for label in ("cpu-a", "cpu-b")] == [1, 1]


def chromium() -> str:
    """The headless browser; where there is none the browser test is skipped, as the container tests
    are without an engine, except in CI, which installs it with the engine (FABENCH_REQUIRE_DOCKER=1)."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        reason = "chromium is not installed (Debian: apt-get install chromium)"
        if os.environ.get("FABENCH_REQUIRE_DOCKER") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    return browser


def test_without_chromium_the_browser_test_is_skipped_except_where_ci_requires_it(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # a folder with no browser in it
    monkeypatch.delenv("FABENCH_REQUIRE_DOCKER", raising=False)
    with pytest.raises(pytest.skip.Exception, match="apt-get install chromium"):
        chromium()
    monkeypatch.setenv("FABENCH_REQUIRE_DOCKER", "1")
    with pytest.raises(pytest.fail.Exception, match="apt-get install chromium"):
        chromium()


def browse(browser: str, page, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=10000",
                           *args, f"file://{page}"], capture_output=True, text=True, timeout=180)


def embedded_results(html_report) -> dict:
    """The results Snakemake's HTML report holds, by path: what its page lists and shows."""
    text = html_report.read_text()
    start = text.index("var results = ", text.index('<script id="results">')) + len("var results = ")
    return json.JSONDecoder().raw_decode(text[start:])[0]


def test_the_html_report_shows_the_reports_and_the_comparison_as_pages_in_a_real_browser(archived, tmp_path):
    browser = chromium()  # skipped before the report is built
    proc = snakemake(archived, "--report", "report.html", "compare", config=run_config("tiny-b", "cpu-b"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    page = browse(browser, archived / "report.html", "--dump-dom")
    assert page.returncode == 0, page.stderr[-2000:]
    for name in ("versions-default.png", "latency.png", "speedup.png"):
        assert name in page.stdout  # each picture is listed in the report the browser built
    shot = tmp_path / "report.png"
    browse(browser, archived / "report.html", f"--screenshot={shot}", "--window-size=1400,1000")
    assert shot.stat().st_size > 10_000  # a drawn page, not a blank one

    results = embedded_results(archived / "report.html")
    pages = {path: entry for path, entry in results.items() if path.endswith(".html")}
    # this config's run, the comparison of both entries, and every archived run's report: tiny-a was
    # archived under another config and is in the report too (issue 40)
    runs = {path for path in pages if path.startswith("compare/runs/")}
    assert set(pages) - runs == {"results/tiny-b/report.html", "compare/compare.html"}
    assert sorted(path.split("/")[-1].split("--")[0] for path in runs) == ["cpu-a", "cpu-b"], sorted(pages)
    assert not [path for path in results if path.endswith(".md")]  # no report offered as a download
    for path, entry in pages.items():
        head, _, data = entry["data_uri"].partition(",")
        assert head.startswith("data:text/html")  # the report's viewer shows text/html in a frame
        shown = tmp_path / path.replace("/", "-")
        shown.write_bytes(base64.b64decode(data))
        dom = browse(browser, shown, "--dump-dom").stdout
        assert "<table>" in dom and "<img" in dom and 'src="data:image/png;base64,' in dom
        if path.startswith(("results/", "compare/runs/")):
            assert "<td>(1, 64, 2, 32)</td>" in dom and "<th>Native (ms)</th>" in dom
        else:
            assert "cpu-a" in dom and "cpu-b" in dom and "Native" in dom


def test_a_variant_only_an_archived_run_has_gets_its_comparison_figure(archived):
    """Runs last in this module: it adds a third entry, with a third variant, to the archive."""
    config = run_config("tiny-c", "cpu-c")
    # First: the backends that read no variant config are measured in the first variant's jobs (on a
    # CPU every measured backend: FlexAttention is left out), so the new variant has cells of its own.
    config["variants"] = {"three-stages": {"title": "Three stages", "triton": {"num_stages": 3}}, **config["variants"]}
    proc = snakemake(archived, "--cores", "1", "archive", config=config)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    proc = snakemake(archived, "--cores", "1", "compare", config=run_config("tiny-b", "cpu-b"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    comparison = json.loads((archived / "compare" / "compare.json").read_text())
    assert "three-stages" in {row["variant"] for row in comparison["rows"]}
    figure = archived / "compare" / "plots" / "versions-three-stages.png"
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and figure.stat().st_size > 20_000  # drawn, not a note
    assert "](plots/versions-three-stages.png)" in (archived / "compare" / "compare.md").read_text()

def copy_of(archived, tmp_path):
    work = tmp_path / "work"
    shutil.copytree(archived, work, symlinks=True)
    return work


def test_compare_runs_again_when_any_archived_byte_changes(archived, tmp_path):
    """Not only when the files' times say so: an edit that keeps the file's time is compared again,
    and the edited entry is left out."""
    work = copy_of(archived, tmp_path)
    config = run_config("tiny-b", "cpu-b")
    quiet = snakemake(work, "--cores", "1", "compare", config=config)
    assert quiet.returncode == 0 and "Nothing to be done" in quiet.stdout + quiet.stderr
    entry = work / json.loads((work / "results" / "tiny-a" / "archived.json").read_text())["path"]
    results = entry / "results.json"
    times = results.stat()
    os.chmod(results, 0o644)
    # One figure's first digit changed, whatever the host's times (a loaded CPU reads 10-75 ms here).
    edited = re.sub(r'"wall_mean_ms": (\d)', lambda m: f'"wall_mean_ms": {(int(m[1]) + 1) % 10}',
                    results.read_text(), count=1)
    assert edited != results.read_text()
    results.write_text(edited)
    os.utime(results, ns=(times.st_atime_ns, times.st_mtime_ns))
    again = snakemake(work, "--cores", "1", "compare", config=config)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "Nothing to be done" not in again.stdout + again.stderr
    left_out = json.loads((work / "compare" / "compare.json").read_text())["left_out"]
    assert [item["id"] for item in left_out] == [f"cpu-a/{entry.name}"]
    assert left_out[0]["problems"] == ["results.json: changed (does not match its digest in SHA256SUMS)"]


def test_a_killed_snakemake_archive_is_recovered_by_running_it_again(archived, tmp_path):
    """SIGKILL to `snakemake archive` after the entry was renamed into place, before its receipt:
    running it again (after Snakemake's own --unlock) names the stored entry, adds none."""
    work = copy_of(archived, tmp_path)
    receipt = work / "results" / "tiny-a" / "archived.json"
    shutil.rmtree(work / json.loads(receipt.read_text())["path"])  # deleted: the run can be archived anew
    receipt.unlink()
    config = run_config("tiny-a", "cpu-a")
    cmd = [sys.executable, "-m", "snakemake", "-s", str(SNAKEFILE), "--directory", str(work),
           "--configfile", str(write_config(work, config)), "--cores", "1", "archive"]
    env = {**os.environ, "FABENCH_TEST_PAUSE_AT": "stored",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(SNAKEFILE.parent / "src"), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if "paused at stored" in line:
            break
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    assert "paused at stored" in seen[-1], "".join(seen)[-3000:]
    [stored] = sorted((work / "archive" / "cpu-a").glob("0*"))
    assert stored.name.startswith("0002-") and verify_entry(stored) == [] and not receipt.exists()

    assert snakemake(work, "--unlock", config=config).returncode == 0
    again = snakemake(work, "--cores", "1", "archive", config=config)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"already archived as cpu-a/{stored.name}" in again.stderr
    assert json.loads(receipt.read_text())["entry"] == f"cpu-a/{stored.name}"
    assert sorted((work / "archive" / "cpu-a").glob("0*")) == [stored]
