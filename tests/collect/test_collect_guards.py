"""What ``gymbench collect`` refuses, keeps and reports, tried as a careful user and an adversary would."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from gymbench.cli import main
from gymbench.collect.command import run_collect
from gymbench.collect.config import CollectConfig
from gymbench.settings import build_settings
from gymbench.testing import make_plugins

from ..rollout.test_dataset import write_tasks
from .test_collect_cli import EXAMPLES, FAST_SIM, gymbench, rows


def collect(tmp_path: Path, *settings: str) -> tuple[int, str]:
    """``gymbench collect`` in this process (fast): exit status and stderr."""
    base = [f"+results_dir={tmp_path / 'results'}", "+progress=false"]
    return main(["collect", *base, *settings]), ""


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (["+request_timeout_s=0"], "setting 'request_timeout_s': got 0.0"),
        (["+request_timeout_s=-1"], "setting 'request_timeout_s'"),
        (["+request_timeout_s=nan"], "setting 'request_timeout_s': got nan"),
        (["+max_retries=-1"], "setting 'max_retries': got -1"),
        (["+num_repeats=1e23"], "setting 'num_repeats'"),
        (["+num_repeats=100000000000000000000000"], "setting 'num_repeats'"),
        (["+global_aiohttp_connector_limit=-1"], "setting 'global_aiohttp_connector_limit': got -1"),
        (["+run_name=../../x"], "setting 'run_name': got '../../x'"),
        (["+verifier_options.feild=answer"], "verifier 'exact-match': unknown setting 'feild'"),
        (["+strategy_options.burst=3"], "strategy 'semaphore': unknown setting 'burst'"),
        (["+backend=openai", "+base_url=http://127.0.0.1:1/v1", "+model=m", "+backend_options.retry=1"],
         "backend 'openai': unknown setting 'retry'"),
        (["+stop_after_failures=-2"], "setting 'stop_after_failures'"),
    ],
)  # fmt: skip
def test_bad_settings_fail_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], settings: list[str], message: str
) -> None:
    out = tmp_path / "o.jsonl"
    status, _ = collect(tmp_path, f"+input_jsonl_fpath={EXAMPLES}", f"+output_jsonl_fpath={out}", *settings)
    err = capsys.readouterr().err
    assert status == 2 and message in err and "Traceback" not in err, err
    assert err.count("gymbench: error:") == 1
    assert not out.exists() and not (tmp_path / "results").exists()


def test_input_used_as_output_is_refused_and_the_tasks_survive(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tasks = write_tasks(tmp_path / "in.jsonl", 50)
    before = tasks.read_bytes()
    link = tmp_path / "link.jsonl"
    link.symlink_to(tasks)
    hard = tmp_path / "hard.jsonl"
    os.link(tasks, hard)
    for output in (tasks, link, hard):
        status, _ = collect(tmp_path, f"+input_jsonl_fpath={tasks}", f"+output_jsonl_fpath={output}",
                            "+overwrite=true")  # fmt: skip
        assert status == 2 and "would destroy the tasks" in capsys.readouterr().err
    assert tasks.read_bytes() == before


@pytest.mark.parametrize("where", ["under_a_file", "metrics_is_a_dir", "results_not_writable"])
def test_unwritable_destinations_fail_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    out = tmp_path / "o.jsonl"
    extra: list[str] = []
    if where == "under_a_file":
        (tmp_path / "file").write_text("x")
        out = tmp_path / "file" / "o.jsonl"
    elif where == "metrics_is_a_dir":
        (tmp_path / "o.jsonl.metrics.json").mkdir()
    else:
        (tmp_path / "ro").write_text("a file where the results directory should be")
        extra = [f"+results_dir={tmp_path / 'ro' / 'results'}"]
    status = main(["collect", f"+input_jsonl_fpath={EXAMPLES}", f"+output_jsonl_fpath={out}", "+progress=false",
                   f"+results_dir={tmp_path / 'results'}", *extra])  # fmt: skip
    err = capsys.readouterr().err
    assert status == 2 and err.startswith("gymbench: error:") and "Traceback" not in err, err
    assert "no server set" not in err  # it stopped before starting the simulator
    assert not (tmp_path / "o.jsonl").exists()


def test_settings_and_flags_in_any_order(tmp_path: Path) -> None:
    out = tmp_path / "o.jsonl"
    done = gymbench(
        "collect", "--results-dir", str(tmp_path / "r"), f"+input_jsonl_fpath={EXAMPLES}", "--limit", "3",
        f"+output_jsonl_fpath={out}", "--no-progress", "+num_samples_in_parallel=2", *FAST_SIM,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert len(rows(out)) == 3 and list((tmp_path / "r").glob("*/*_collect.json"))


def test_dollar_braces_in_a_value_are_literal(tmp_path: Path) -> None:
    out = tmp_path / "o.jsonl"
    done = gymbench(
        "collect", f"+input_jsonl_fpath={EXAMPLES}", f"+output_jsonl_fpath={out}", "+limit=2",
        "+save_results=false", "+responses_create_params.instructions=Use ${var} and ${oc.env:HOME}", *FAST_SIM,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert {r["responses_create_params"]["instructions"] for r in rows(out)} == {"Use ${var} and ${oc.env:HOME}"}


def test_exact_big_ids_surrogates_and_a_bom_survive_the_round_trip(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    lines = [
        '{"id": 123456789012345678901, "responses_create_params": {"input": "What is 1 + 1?"}, "expected_answer": "2"}',
        '{"id": "\\ud800", "responses_create_params": {"input": "What is 2 + 2?"}, "expected_answer": "4"}',
    ]
    tasks.write_bytes(b"\xef\xbb\xbf" + "\n".join(lines).encode() + b"\n")
    out = tmp_path / "o.jsonl"
    done = gymbench("collect", f"+input_jsonl_fpath={tasks}", f"+output_jsonl_fpath={out}", "+save_results=false",
                    *FAST_SIM)  # fmt: skip
    assert done.returncode == 0, done.stderr
    by_task = {r["task_index"]: r for r in rows(out)}
    assert by_task[0]["id"] == 123456789012345678901 and by_task[1]["id"] == "\ud800"


def test_piped_input_is_collected_in_one_pass(tmp_path: Path) -> None:
    out = tmp_path / "o.jsonl"
    data = "".join(line for line in EXAMPLES.read_text().splitlines(keepends=True)[:6])
    done = subprocess.run(
        [sys.executable, "-m", "gymbench.cli", "collect", "+input_jsonl_fpath=/dev/stdin",
         f"+output_jsonl_fpath={out}", "+save_results=false", *FAST_SIM],
        input=data, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert sorted(r["task_index"] for r in rows(out)) == list(range(6))
    resumed = subprocess.run(
        [sys.executable, "-m", "gymbench.cli", "collect", "+input_jsonl_fpath=/dev/stdin",
         f"+output_jsonl_fpath={out}", "+resume=true"],
        input=data, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert resumed.returncode == 2 and "is a pipe, so +resume=true cannot re-read it" in resumed.stderr


def test_resume_refuses_a_different_run_unless_forced(tmp_path: Path) -> None:
    tasks = write_tasks(tmp_path / "tasks.jsonl", 10)
    out = tmp_path / "o.jsonl"
    base = ["collect", f"+input_jsonl_fpath={tasks}", f"+output_jsonl_fpath={out}", "+save_results=false",
            "+limit=4", *FAST_SIM]  # fmt: skip
    assert gymbench(*base).returncode == 0
    changed = gymbench(*base, "+resume=true", "+num_repeats=2", "+verifier=none")
    assert changed.returncode == 2
    assert (
        "settings.num_repeats: was 1, now 2" in changed.stderr
        and 'settings.verifier: was "exact-match", now "none"' in changed.stderr
    )
    assert "+resume_force=true" in changed.stderr
    other = tmp_path / "other.jsonl"
    other.write_text(tasks.read_text().replace('"q', '"other q'))
    moved = gymbench(*[a.replace(str(tasks), str(other)) for a in base], "+resume=true")
    assert moved.returncode == 2 and "input.blake2b" in moved.stderr
    forced = gymbench(*base, "+resume=true", "+num_repeats=2", "+resume_force=true")
    assert forced.returncode == 0, forced.stderr
    assert "resuming a different run (+resume_force=true)" in forced.stderr
    assert len(rows(out)) == 8


def test_rows_from_another_tool_are_kept_on_resume(tmp_path: Path) -> None:
    tasks = write_tasks(tmp_path / "tasks.jsonl", 4)
    out = tmp_path / "o.jsonl"
    foreign = {"task_index": 1, "rollout_index": 0, "reward": 1.0, "response": {"text": "made elsewhere"}}
    out.write_text(json.dumps(foreign) + "\n")
    done = gymbench("collect", f"+input_jsonl_fpath={tasks}", f"+output_jsonl_fpath={out}", "+resume=true",
                    "+save_results=false", *FAST_SIM)  # fmt: skip
    assert done.returncode == 0, done.stderr
    written = rows(out)
    assert written[0] == foreign and sorted(r["task_index"] for r in written) == [0, 1, 2, 3]


# --------------------------------------------------------------------------- servers that misbehave


@pytest.fixture
def chat_only_server() -> Iterator[str]:
    """A server that speaks chat completions only: every POST to /v1/responses is a 404."""

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "m", "object": "model"}]})

    async def missing(request: web.Request) -> web.Response:
        return web.json_response({"detail": "Not Found"}, status=404)

    yield from _serve([web.get("/v1/models", models), web.post("/v1/responses", missing)])


@pytest.fixture
def echoing_server() -> Iterator[str]:
    """A server that echoes the request's Authorization header in its 400 error body."""

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": []})

    async def echo(request: web.Request) -> web.Response:
        return web.json_response({"error": f"bad header {request.headers.get('Authorization')}"}, status=400)

    yield from _serve([web.get("/v1/models", models), web.post("/v1/chat/completions", echo)])


def _serve(routes: list[Any]) -> Iterator[str]:
    import threading

    loop = asyncio.new_event_loop()
    app = web.Application()
    app.add_routes(routes)
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.run_until_complete(runner.cleanup())
        loop.close()


def test_a_server_without_the_responses_api_stops_the_run_with_advice(tmp_path: Path, chat_only_server: str) -> None:
    tasks = write_tasks(tmp_path / "tasks.jsonl", 200)
    out = tmp_path / "o.jsonl"
    done = gymbench("collect", "+backend=openai", f"+base_url={chat_only_server}", "+model=m",
                    f"+input_jsonl_fpath={tasks}", f"+output_jsonl_fpath={out}", "+num_samples_in_parallel=4",
                    "+save_results=false", "+progress=false")  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.count("add +api=chat") >= 1 and "stopped early" in done.stderr
    assert len(rows(out)) < 40  # not 200 rows of http_error
    assert done.stderr.strip().splitlines()[-1].startswith("gymbench: error: stopped early")


def test_an_echoed_key_never_reaches_rows_records_or_the_terminal(tmp_path: Path, echoing_server: str) -> None:
    secret = "sk-echo-me-please-0123456789"
    out = tmp_path / "o.jsonl"
    done = gymbench(
        "collect", "+backend=openai", f"+base_url={echoing_server}", "+model=m", "+api=chat",
        f"+input_jsonl_fpath={EXAMPLES}", f"+output_jsonl_fpath={out}", "+limit=3", "+api_key_env=MY_KEY",
        f"+results_dir={tmp_path / 'results'}", env={"MY_KEY": secret},
    )  # fmt: skip
    assert done.returncode == 1
    written = rows(out)
    assert len(written) == 3 and all(r["status"] == "failed" for r in written)
    assert "[REDACTED]" in written[0]["failure"]["reason"]
    for path in [out, *tmp_path.rglob("*.json")]:
        assert secret not in path.read_text(), path
    assert secret not in done.stdout + done.stderr


def test_a_plugin_strategy_that_raises_fails_the_run_and_says_what_is_missing(tmp_path: Path) -> None:
    from gymbench import Component, hookimpl
    from gymbench.builtin.semaphore import SemaphoreStrategy

    class Broken(SemaphoreStrategy):
        def observe(self, outcome: Any) -> None:
            raise KeyError("boom")

    class Plugin:
        @hookimpl
        def gymbench_register_strategies(self) -> list[Component]:
            return [Component("broken", lambda options: Broken(2))]

    config = build_settings(CollectConfig, [
        f"input_jsonl_fpath={EXAMPLES}", f"output_jsonl_fpath={tmp_path / 'o.jsonl'}", "strategy=broken",
        "limit=10", "save_results=false", "progress=false", *(s.lstrip("+") for s in FAST_SIM),
    ])  # fmt: skip
    assert run_collect(config, make_plugins(Plugin())) == 1
    assert len(rows(tmp_path / "o.jsonl")) < 10


def test_show_into_a_closed_pipe_is_quiet(tmp_path: Path) -> None:
    from gymbench.fingerprint import collect_fingerprint
    from gymbench.record import BenchmarkResult, Metric, ResultsRecord, save_record

    bench = [BenchmarkResult(f"b{i}", metrics={"time": Metric(1.0, "s", "lower")}) for i in range(3000)]
    path = save_record(ResultsRecord("r", bench, collect_fingerprint()), tmp_path / "r.json")
    done = subprocess.run(
        f"{sys.executable} -m gymbench.cli show {path} | head -1",
        shell=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.stdout.count("\n") == 1 and "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr
