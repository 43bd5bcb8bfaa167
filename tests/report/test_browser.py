"""Every kind of report, loaded in headless Chromium: it loads, no image is broken, the answer is on
the page, no script fails; a screenshot of each is kept (``GYMBENCH_SCREENSHOTS`` chooses where:
``GYMBENCH_SCREENSHOTS=docs/images`` refreshes the docs' pictures). Without Chromium these skip
with the line that installs it. A deliberately broken page proves the checks can fail.

The reports' wording is changing (issue 42), so these assert on what stays: the verdict word, a
figure's unit, the diagnosis's own verdict, headings and images, not on sentences."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from gymbench.cli import main
from gymbench.errors import GymbenchError
from gymbench.gate.noise import noise_to_dict
from gymbench.gate.store import save_json
from gymbench.record import BenchmarkResult, Metric, ResultsRecord, load_record, save_record
from gymbench.report.browser import INSTALL_HINT, PageCheck, check_page, find_chromium
from gymbench.report.run_report import RUN_KINDS
from tests.collect.test_collect_cli import EXAMPLES, FAST_SIM, gymbench
from tests.gate.synthetic import calibration, fingerprint, save_run, suite

KNEE16 = ["+sim.max_num_seqs=16", "+sim.step_base_s=0.01", "+sim.step_per_seq_s=0.0005", "+sim.output_tokens_mean=8"]
TINY_TRAIN = ["--model", "transformer", "--size", "tiny", "--seq-len", "16", "--batch", "4", "--steps", "1",
              "--warmup", "0", "--no-progress", "--no-memory", "--no-flops", "--device", "cpu"]  # fmt: skip
VERDICT_FIRST_CHARS = 400
"""The comparison's verdict word must be this near the top of the visible text: the answer first."""


@dataclass(frozen=True)
class Rendered:
    """A report written to ``page`` and what its visible text must hold."""

    page: Path
    answer: re.Pattern[str]
    within: int | None = None
    """Only the first this many characters of the visible text are searched."""


@pytest.fixture(scope="module")
def chromium() -> str:
    try:
        return find_chromium()
    except GymbenchError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    chosen = os.environ.get("GYMBENCH_SCREENSHOTS")
    return Path(chosen).resolve() if chosen else tmp_path_factory.mktemp("screenshots")


def comparison(tmp: Path) -> Rendered:
    """Three stored runs, the last with one benchmark 50% slower, gated with a quiet calibration."""
    results = tmp / "results"
    save_run(results, suite(1, benchmarks=4, name="base"), "20260101T000000")
    save_run(results, suite(2, benchmarks=4, name="mid"), "20260102T000000")
    save_run(results, suite(3, benchmarks=4, name="cand", slow={0: 0.5}), "20260103T000000")
    quiet = save_json(noise_to_dict(calibration(suite(1)), "2026-01-01T00:00:00+00:00"), tmp / "quiet.json")
    page = tmp / "compare.html"
    argv = ["report", "base", "cand", "--results-dir", str(results), "--calibration", str(quiet), "-o", str(page)]
    assert main([*argv, "--fail-on", "none"]) == 0
    return Rendered(page, re.compile(r"\bREGRESS", re.IGNORECASE), VERDICT_FIRST_CHARS)


def collect(tmp: Path) -> Rendered:
    out = tmp / "out.jsonl"
    done = gymbench("collect", f"+input_jsonl_fpath={EXAMPLES}", f"+output_jsonl_fpath={out}", "+limit=40",
                    "+num_samples_in_parallel=8", "+stream=true", "+slo_ttft_ms=1000", f"+results_dir={tmp / 'r'}",
                    *FAST_SIM)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return run_report(next((tmp / "r").glob("*/*_collect.json")), tmp, re.compile(r"rollouts/s"))


def tune(tmp: Path) -> Rendered:
    """A sweep's record as the tuner writes it (a real sweep takes ~40 s; its report reads only this)."""
    table = [{"parallelism": p, "rollouts_per_s": min(p, 16) * 2.0, "output_tokens_per_s": min(p, 16) * 60.0,
              "latency_p50_s": 0.2 * max(1, p / 16), "latency_p99_s": 0.3 * max(1, p / 16), "error_rate": 0.0}
             for p in (1, 2, 4, 8, 16, 32, 64)]  # fmt: skip
    metrics = {"knee_parallelism": Metric(16.0, "parallelism", "higher"),
               "recommended_parallelism": Metric(16.0, "parallelism", "higher")}  # fmt: skip
    bench = BenchmarkResult("tune", {}, metrics, extra={"table": table, "knee_ci": [12.0, 20.0]})
    path = save_record(ResultsRecord("sweep", [bench], fingerprint(), kind="tune"), tmp / "tune.json")
    return run_report(path, tmp, re.compile(r"parallelism", re.IGNORECASE))


def diagnose(tmp: Path) -> Rendered:
    done = gymbench("diagnose", f"+input_jsonl_fpath={EXAMPLES}", "+low=2", "+high=8", "+max_batches=8",
                    f"+results_dir={tmp / 'r'}", *KNEE16, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    record = next((tmp / "r").glob("*/*_diagnose.json"))
    verdict = load_record(record).benchmarks[0].extra["verdict"]
    return run_report(record, tmp, re.compile(re.escape(verdict), re.IGNORECASE))


def train(tmp: Path) -> Rendered:
    pytest.importorskip("torch", reason="gymbench train needs torch: pip install -e '.[train]'")
    assert main(["train", *TINY_TRAIN, "--save", "tiny", "--results-dir", str(tmp / "r")]) == 0
    return run_report(next((tmp / "r").glob("*/*_tiny.json")), tmp, re.compile(r"tokens/s"))


def run_report(record: Path, tmp: Path, answer: re.Pattern[str]) -> Rendered:
    page = tmp / f"{load_record(record).kind}.html"
    assert main(["report", str(record), "-o", str(page)]) == 0
    return Rendered(page, answer)


REPORTS: dict[str, Callable[[Path], Rendered]] = {
    "compare": comparison,
    "collect": collect,
    "tune": tune,
    "diagnose": diagnose,
    "train": train,
}


@pytest.mark.parametrize("kind", REPORTS)
def test_each_report_shows_in_a_browser(
    kind: str, chromium: str, screenshots: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if kind != "compare" and kind not in RUN_KINDS:
        pytest.skip(f"gymbench report renders a run report for {', '.join(RUN_KINDS)} records only, not {kind}")
    rendered = REPORTS[kind](tmp_path)
    shot = screenshots / f"report-{kind}.png"
    seen = check_page(rendered.page, shot)
    with capsys.disabled():  # in the log of a plain run; .ci/run lists the folder after an xdist run
        print(f"\nscreenshot: {shot}")
    assert seen.loaded, seen.load_error
    assert seen.images and not seen.broken_images, seen.broken_images
    assert not seen.script_errors, seen.script_errors
    assert seen.headings, "no heading on the page"
    assert rendered.answer.search(seen.text[: rendered.within]), (rendered.answer.pattern, seen.text[:600])
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_broken_image_and_a_failing_script_are_caught(chromium: str, tmp_path: Path) -> None:
    page = tmp_path / "broken.html"
    page.write_text("<!doctype html><html><head><title>broken</title></head><body><h1>Broken</h1>"
                    '<img alt="not a png" src="data:image/png;base64,AAAA">'
                    "<script>throw new Error('x')</script></body></html>")  # fmt: skip
    seen: PageCheck = check_page(page)
    assert seen.loaded and seen.headings == ["Broken"] and seen.screenshot is None
    assert seen.broken_images == ["not a png"]
    assert seen.scripts == 1 and len(seen.script_errors) == 1 and "Error: x" in seen.script_errors[0]
    assert not seen.ok


def test_no_browser_is_one_line_that_says_how_to_install_one(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("GYMBENCH_CHROMIUM", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(GymbenchError, match=re.escape(INSTALL_HINT)) as raised:
        find_chromium()
    assert "\n" not in str(raised.value)
    monkeypatch.setenv("GYMBENCH_CHROMIUM", str(tmp_path / "nothing"))
    with pytest.raises(GymbenchError, match="GYMBENCH_CHROMIUM=.* is not an executable"):
        find_chromium()


def test_a_missing_page_is_named(tmp_path: Path) -> None:
    with pytest.raises(GymbenchError, match="missing.html: no such file"):
        check_page(tmp_path / "missing.html")
