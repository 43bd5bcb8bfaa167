"""``gymbench report RECORD`` on one collection or tuning sweep: every figure there, decoded, of a
readable size; the percentiles, goodput and the server's view in the page."""

from __future__ import annotations

import base64
import io
from pathlib import Path

import pytest

from gymbench.cli import main
from gymbench.record import BenchmarkResult, Metric, ResultsRecord, save_record
from tests.collect.test_collect_cli import EXAMPLES, FAST_SIM, gymbench
from tests.gate.synthetic import fingerprint
from tests.report.test_reports import check_html

MIN_SIDE_PX = 200


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
    for expected in ("TTFT", "ITL (inter-token)", "TPOT (per output token)", "e2e", "Goodput", "tokens generated"):
        assert expected in text
    assert "p99" in text and " *" in text  # 40 rollouts: p99 is marked, not given an interval


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
