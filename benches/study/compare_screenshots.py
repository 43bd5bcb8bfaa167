"""The comparison report's screenshots in docs/images/, taken by headless chromium (issue 42).

Two inputs: the two unchanged quick runs of ``examples/mathenv`` kept in
``tests/report/data/mathenv_quick/`` (``report-compare.png``), and a store of five nightly runs
of a twelve-benchmark synthetic suite then a candidate with ``test_verify[math]`` 20 % slower,
with a calibration (``report-compare-slowed.png``).

    python -m benches.study.compare_screenshots [OUT_DIR]     # from the repository root; default docs/images
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from gymbench.cli import main as gymbench
from gymbench.fingerprint import machine_info
from gymbench.gate.noise import noise_to_dict
from gymbench.gate.store import save_json
from gymbench.record import ResultsRecord, load_record
from tests.gate.synthetic import calibration, save_run, suite

ROOT = Path(__file__).resolve().parents[2]
QUICK = ROOT / "tests" / "report" / "data" / "mathenv_quick"
TESTS = "env::reset env::step verify::verify[math] verify::verify[code] tokenize::tokenize rows::write_rows"
TESTS += " rows::read_rows reward::reward dataset::shuffle dataset::load prompt::render prompt::parse"
NAMES = [f"benches/test_{t.split('::')[0]}.py::test_{t.split('::')[1]}" for t in TESTS.split()]


def _named(record: ResultsRecord) -> ResultsRecord:
    benches = [dataclasses.replace(b, name=n) for b, n in zip(record.benchmarks, NAMES, strict=True)]
    return dataclasses.replace(record, benchmarks=benches)


def slowed_store(root: Path) -> Path:
    key = machine_info()["key"]
    records = [_named(suite(seed, name=f"nightly{seed}", factor=1 + 0.01 * (seed % 3), key=key)) for seed in range(5)]
    records.append(_named(suite(9, name="slowed", slow={2: 0.2}, key=key)))
    for day, record in enumerate(records, start=21):
        save_run(root, record, f"202611{day}T020000")
    return save_json(noise_to_dict(calibration(records[0]), "2026-11-20T00:00:00+00:00"), root / "quiet.json")


def screenshot(html: Path, png: Path, height: int) -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        raise SystemExit("no chromium on PATH: apt-get install -y chromium")
    subprocess.run([browser, "--headless", "--no-sandbox", f"--screenshot={png}", f"--window-size=1280,{height}",
                    html.as_uri()], check=True, capture_output=True, timeout=120)  # fmt: skip


def main(out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name in ("base", "cand"):
            save_run(work / "quick", load_record(QUICK / f"{name}.json"), "20261128T110139" if name == "base" else
                     "20261128T110258")  # fmt: skip
        gymbench(["report", "base", "cand", "--results-dir", str(work / "quick"), "--fail-on", "none",
                  "-o", str(work / "quick.html")])  # fmt: skip
        screenshot(work / "quick.html", out / "report-compare.png", 1400)
        quiet = slowed_store(work / "slow")
        gymbench(["report", "nightly4", "slowed", "--results-dir", str(work / "slow"), "--calibration", str(quiet),
                  "--fail-on", "none", "-o", str(work / "slow.html")])  # fmt: skip
        screenshot(work / "slow.html", out / "report-compare-slowed.png", 1250)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "images")
