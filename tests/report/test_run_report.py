"""``gymbench report RECORD`` on one collection, tuning sweep, diagnosis or training benchmark: the
title says what ran and the first paragraph gives the answer; labels are words, not metric ids; no
time reads ``1.02e+03``; every figure there, decoded, of a readable size."""

from __future__ import annotations

import base64
import io
import re
import subprocess
import sys
from html import unescape
from pathlib import Path

import pytest

from gymbench.cli import main
from gymbench.record import BenchmarkResult, Metric, ResultsRecord, save_record
from tests.collect.test_collect_cli import EXAMPLES, FAST_SIM, gymbench
from tests.gate.synthetic import fingerprint
from tests.report.test_reports import check_html
from tests.tune.test_tune_and_diagnose import KNEE16

MIN_SIDE_PX = 200
RAW_IDS = ("error_rate", "mean_reward", "rollouts_per_s", "stage_", "phase_", "knee_parallelism", "step_time")


def opening(text: str) -> tuple[str, str]:
    """The first heading and the answer block under it, as text."""
    title = re.search(r"<h1>(.*?)</h1>", text, re.S)
    answer = re.search(r'<div class="answer">(.*?)</div>', text, re.S)
    assert title and answer, text[:2000]
    assert text.index(answer.group(0)) < text.index("<h2>")  # the answer before any detail
    return unescape(title.group(1)), unescape(re.sub(r"<[^>]+>", " ", answer.group(1)))


def visible_text(text: str) -> str:
    """The page without its embedded images (base64 may hold any letters)."""
    return unescape(re.sub(r'src="data:[^"]*"', "", text))


def check_readable(text: str) -> None:
    """Labels are words; no exponent in any number shown."""
    shown = visible_text(text)
    cells = re.findall(r"<td>(.*?)</td>", shown)
    assert not [cell for cell in cells if cell in RAW_IDS or cell.startswith(("stage_", "phase_"))], cells
    assert not re.search(r"\d\.?\d*e[+-]\d", shown), re.findall(r".{40}\d\.?\d*e[+-]\d.{20}", shown)
    # a unit that only repeats the label (mean reward 0.74 reward), or a share not shown as %
    assert not [cell for cell in cells if re.fullmatch(r"[\d.,]+ (ratio|reward|parallelism)", cell)], cells


def image_sizes(text: str) -> list[tuple[int, int]]:
    """Every embedded image decoded as a PNG: (width, height) in pixels."""
    import matplotlib.image

    sizes = []
    for src in check_html(text).images:
        pixels = matplotlib.image.imread(io.BytesIO(base64.b64decode(src.split(",", 1)[1])), format="png")
        sizes.append((pixels.shape[1], pixels.shape[0]))
    return sizes


def test_a_collection_report_has_every_figure(tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    done = gymbench("collect", f"+input_jsonl_fpath={EXAMPLES}", f"+output_jsonl_fpath={out}", "+limit=40",
                    "+num_samples_in_parallel=8", "+stream=true", "+slo_ttft_ms=1000", f"+results_dir={tmp_path / 'r'}",
                    *FAST_SIM)  # fmt: skip
    assert done.returncode == 0, done.stderr
    record = next((tmp_path / "r").glob("*/*_collect.json"))
    report = tmp_path / "collect.html"
    assert main(["report", str(record), "-o", str(report)]) == 0
    text = report.read_text()
    sizes = image_sizes(text)
    assert len(sizes) == 4  # percentiles, over time, stages, the server over time
    assert all(min(size) >= MIN_SIDE_PX and max(size) / min(size) < 5 for size in sizes), sizes
    assert sizes[0][0] >= 800  # the percentile panels: readable, not 2-inch thumbnails
    for expected in ("TTFT", "ITL (inter-token)", "TPOT (per output token)", "e2e", "Goodput", "tokens generated"):
        assert expected in text
    assert "p99" in text and " *" in text  # 40 rollouts: p99 is marked, not given an interval
    title, answer = opening(text)
    assert title.startswith("collect: 40 rollouts of example_tasks.jsonl against the gymbench simulator")
    assert title.endswith("at parallelism 8") and "<title>collect: 40 rollouts" in text
    assert re.search(r"^ *[\d.]+ rollouts/s and [\d.,]+ output tokens/s over .*: 40 completed, 0 failed", answer)
    assert re.search(r"TTFT latency \(95% intervals\): p50 [\d.]+ m?s \[[\d.]+–[\d.]+\]", answer), answer
    assert "e2e latency (95% intervals): p50" in answer and "Goodput" in answer
    assert "<td>error rate</td><td>0%</td>" in text and "<td>mean reward</td>" in text
    check_readable(text)


def test_a_tune_report_plots_the_sweep(tmp_path: Path) -> None:
    table = [{"parallelism": p, "rollouts_per_s": min(p, 16) * 2.0, "output_tokens_per_s": min(p, 16) * 60.0,
              "latency_p50_s": 0.2 * max(1, p / 16), "latency_p99_s": 0.3 * max(1, p / 16), "error_rate": 0.0}
             for p in (1, 2, 4, 8, 16, 32, 64)]  # fmt: skip
    bench = BenchmarkResult("tune", {}, {"knee_parallelism": Metric(16.0, "parallelism", "higher")},
                            extra={"table": table, "knee_ci": [12.0, 20.0]})  # fmt: skip
    path = save_record(ResultsRecord("sweep", [bench], fingerprint(), kind="tune"), tmp_path / "t.json")
    assert main(["report", str(path), "-o", str(tmp_path / "tune.html")]) == 0
    text = (tmp_path / "tune.html").read_text()
    assert len(image_sizes(text)) == 1 and "<td>64</td>" in text and "200 ms" in text
    title, answer = opening(text)
    assert title.startswith("tune: sweep of the input over parallelism 1–64")
    assert answer.strip().startswith("Knee at parallelism 16 (95% interval 12–20)")
    check_readable(text)


def test_a_tune_report_answers_with_the_recommendation_first(tmp_path: Path) -> None:
    bench = BenchmarkResult("tune", {"input": "tasks.jsonl", "method": "sweep"}, {
        "knee_parallelism": Metric(18.86, "parallelism", "higher"),
        "plateau_rollouts_per_s": Metric(20.04, "rollouts/s", "higher"),
        "recommended_parallelism": Metric(19.0, "parallelism", "higher"),
        "expected_rollouts_per_s": Metric(19.52, "rollouts/s", "higher"),
        "expected_share_of_plateau": Metric(0.974, "ratio", "higher"),
    }, extra={"knee_ci": [18.4, 19.5], "table": [], "server_counters": {"url": "http://127.0.0.1:8000/metrics",
                                                                        "engine": "vllm"}})  # fmt: skip
    path = save_record(ResultsRecord("sweep", [bench], fingerprint(), kind="tune"), tmp_path / "t.json")
    assert main(["report", str(path), "-o", str(tmp_path / "tune.html")]) == 0
    text = (tmp_path / "tune.html").read_text()
    title, answer = opening(text)
    assert title == "tune: sweep of tasks.jsonl against a vllm server at 127.0.0.1:8000"
    assert (
        answer.split("\n")[0]
        .strip()
        .startswith("Use num_samples_in_parallel=19: 19.5 rollouts/s expected, 97.4% of the plateau.")
    )
    assert "Knee at parallelism 18.9 (95% interval 18.4–19.5); plateau 20 rollouts/s." in answer
    assert "<td>knee (parallelism)</td><td>18.86</td>" in text
    check_readable(text)


def test_a_tune_report_over_replicas_gives_the_answer_per_replica(tmp_path: Path) -> None:
    bench = BenchmarkResult("tune", {"input": "tasks.jsonl", "method": "sweep"}, {
        "knee_parallelism": Metric(17.7, "parallelism", "higher"),
        "recommended_parallelism": Metric(18.0, "parallelism", "higher"),
    }, extra={"knee_ci": [11.2, 32.0], "table": [], "server_counters": {"url": "http://127.0.0.1:8000/metrics",
              "engine": "llamacpp"},
              "per_replica": {"replicas": 3, "knee": 5.9, "knee_ci": [3.73, 10.67], "recommended": 6.0}})  # fmt: skip
    path = save_record(ResultsRecord("sweep", [bench], fingerprint(), kind="tune"), tmp_path / "t.json")
    assert main(["report", str(path), "-o", str(tmp_path / "tune.html")]) == 0
    title, answer = opening((tmp_path / "tune.html").read_text())
    assert title == "tune: sweep of tasks.jsonl against a llamacpp server over 3 replicas"
    assert "Over 3 replicas that is 6 in parallel per replica; knee 5.9 per replica (95% interval 3.73–10.7)." in answer


def test_a_diagnosis_report_opens_with_the_verdict_and_what_to_do(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gymbench.cli", "diagnose", f"+input_jsonl_fpath={EXAMPLES}", "+low=2", "+high=8",
         f"+results_dir={tmp_path / 'results'}", "+max_batches=8", *[f"+sim.{k}={v}" for k, v in KNEE16.items()]],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    verdict = re.search(r"verdict: (.*)\nnext step: (.*)\n", done.stdout)
    assert verdict, done.stdout
    record = next((tmp_path / "results").glob("*/*_diagnose.json"))
    assert main(["report", str(record), "-o", str(tmp_path / "d.html")]) == 0
    text = (tmp_path / "d.html").read_text()
    title, answer = opening(text)
    assert title.startswith("diagnose: example_tasks.jsonl at parallelism 2 and 8 against a vllm server at 127.0.0.1:")
    assert f"Bottleneck: {verdict.group(1)}. Next step: {verdict.group(2)}." in answer
    assert re.search(r"Throughput [\d.]+ rollouts/s at 2 → [\d.]+ at 8 \([\d.]+×\)", answer), answer
    assert "<td>rollouts/s at the low parallelism</td>" in text and "<h2>Evidence</h2>" in text
    check_readable(text)


def test_a_training_report_gives_step_time_throughput_memory_and_mfu(tmp_path: Path) -> None:
    argv = ["train", "--model", "mlp", "--size", "tiny", "--batch", "8", "--steps", "3", "--warmup", "1",
            "--save", "t", "--results-dir", str(tmp_path / "results")]  # fmt: skip
    assert main(argv) == 0
    record = next((tmp_path / "results").glob("*/*_t.json"))
    assert main(["report", str(record), "-o", str(tmp_path / "train.html")]) == 0
    text = (tmp_path / "train.html").read_text()
    title, answer = opening(text)
    assert title.startswith("train: mlp (tiny) LM step, fp32, batch 8")
    assert re.search(r"Step time [\d.,]+ (ms|µs|s) median \(IQR [\d.,]+ (ms|µs|s|ns), 3 steps\)\.", answer), answer
    assert re.search(r"Throughput [\d.,]+ samples/s", answer) and "Peak memory" in answer and "MFU" in answer
    sizes = image_sizes(text)
    assert len(sizes) == 2 and all(min(size) >= MIN_SIDE_PX for size in sizes)  # step times, phases
    check_readable(text)


def test_a_suite_record_alone_still_means_a_comparison_with_the_latest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bench = BenchmarkResult("a.py::t", {}, {"time": Metric.from_samples([1.0, 1.1], "s", "lower")})
    path = save_record(ResultsRecord("suite", [bench], fingerprint()), tmp_path / "s.json")
    code = main(["report", str(path), "-o", str(tmp_path / "x.html"), "--results-dir", str(tmp_path / "none")])
    assert code == 2 and "report on" not in capsys.readouterr().out


def test_a_saved_runs_name_alone_is_a_report_on_that_run_not_on_it_against_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.gate.synthetic import save_run

    monkeypatch.chdir(tmp_path)
    table = [{"parallelism": p, "rollouts_per_s": min(p, 4) * 2.0, "output_tokens_per_s": min(p, 4) * 60.0,
              "latency_p50_s": 0.2, "latency_p99_s": 0.3, "error_rate": 0.0} for p in (1, 2, 4, 8)]  # fmt: skip
    bench = BenchmarkResult("tune", {}, {"knee_parallelism": Metric(4.0, "parallelism", "higher")},
                            extra={"table": table})  # fmt: skip
    save_run(tmp_path / "results", ResultsRecord("sweep", [bench], fingerprint(), kind="tune"), "20260101T000000")
    assert main(["report", "sweep", "-o", "named.html", "--results-dir", "results"]) == 0
    assert main(["report", "-o", "only.html", "--results-dir", "results"]) == 0  # the store's only run
    out = capsys.readouterr().out
    assert out.count("report on tune run sweep written to") == 2 and "nothing to compare" not in out
    assert "<td>8</td>" in (tmp_path / "named.html").read_text() and (tmp_path / "only.html").is_file()


def test_a_record_without_the_usual_figures_still_opens_with_what_ran(tmp_path: Path) -> None:
    """A batch search has no step time; an old tune record no recommendation: the page still says
    what ran and answers with what it has, rather than failing or opening on a blank."""
    found = {"largest_fit": Metric(512.0, "samples", "higher"), "chosen_batch": Metric(448.0, "samples", "higher")}
    search = BenchmarkResult("train", {"model": "mlp", "batch": 64}, found)
    for kind, bench, first, said in (
        ("train", search, "train: mlp, batch 64", "Batch search: largest fit 512, chosen batch 448."),
        ("tune", BenchmarkResult("tune", {}, {}), "tune: sweep of the input against a server", "headline figures"),
    ):
        path = save_record(ResultsRecord("r", [bench], fingerprint(), kind=kind), tmp_path / f"{kind}.json")
        assert main(["report", str(path), "-o", str(tmp_path / f"{kind}.html")]) == 0
        title, answer = opening((tmp_path / f"{kind}.html").read_text())
        assert title == first and said in answer
