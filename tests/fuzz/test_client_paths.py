"""Every HTTP client path against a hostile server in every mode: one line, a non-zero exit within
the deadline the command is given, no traceback, no file left behind, the key nowhere.

The paths are the commands that talk to a server (:data:`CLIENT_PATHS`); the modes are every mode
of ``tests/hostile_server.py`` (the echo modes and the stage modes: hangs at accept, headers and
body, garbage, wrong JSON shapes, answers without end, trickling). Each command is given short
deadlines (``+request_timeout_s=3``); the case's own bound (:data:`.contract.HANG_S`) only ends a
real hang. A reach test fails when a module of gymbench opens HTTP connections and is neither a
listed path nor excused. A seeded sample (every mode once, every path once) runs by default; the
whole grid is ``slow`` and runs with ``GYMBENCH_FUZZ_FULL=1``.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ..hostile_server import MODES, STAGE_MODES, HostileServer, start_hostile_server, start_stage_server
from .bad_tasks import GOOD
from .cases import Env
from .contract import HANG_S, ContractCase, as_params, run_contract, tally
from .reach import PACKAGE, SECRET

KEY_ENV = ("GYMBENCH_FUZZ_KEY", SECRET)
QUICK = ["+request_timeout_s=3", "+max_retries=0", "+api_key_env=GYMBENCH_FUZZ_KEY", "+progress=false"]
Urls = Callable[[str], str]
"""mode -> that mode's ``http://127.0.0.1:PORT/v1``."""


def _tasks(root: Path) -> str:
    (root / "tasks.jsonl").write_text((GOOD + "\n") * 2)
    return str(root / "tasks.jsonl")


def _collect(root: Path, *settings: str) -> list[str]:
    return [
        "collect",
        f"+input_jsonl_fpath={_tasks(root)}",
        f"+output_jsonl_fpath={root / 'o.jsonl'}",
        "+save_results=false",
        "+stop_after_failures=1",
        *QUICK,
        *settings,
    ]


def _port(url: str) -> str:
    return url.rsplit(":", 1)[1].split("/")[0]


CLIENT_PATHS: dict[str, Callable[[Path, str], list[str]]] = {
    # name -> (case directory, the mode's base URL) -> argv
    "collect-openai": lambda root, url: _collect(root, "+backend=openai", f"+base_url={url}", "+model=m"),
    "collect-openai-chat-stream": lambda root, url: _collect(
        root, "+backend=openai", f"+base_url={url}", "+model=m", "+api=chat", "+stream=true"
    ),
    "collect-metrics-watch": lambda root, url: _collect(
        root, "+backend=openai", f"+base_url={url}", "+model=m", "+scrape_metrics=true"
    ),
    "collect-nemo-gym-head": lambda root, url: _collect(
        root, "+agent_name=agent", "+head_server.host=127.0.0.1", f"+head_server.port={_port(url)}"
    ),
    "collect-nemo-gym-agent-run": lambda root, url: _collect(root, f"+agent_url={url.removesuffix('/v1')}"),
    "calibrate-sim": lambda root, url: [
        "calibrate-sim",
        f"+base_url={url}",
        "+model=m",
        *QUICK,
        f"+output={root / 'profile.yaml'}",
        "+window_s=1",
        "+load_warmup_s=0",
    ],
    "tune-probes": lambda root, url: [
        "tune",
        f"+input_jsonl_fpath={_tasks(root)}",
        "+backend=openai",
        f"+base_url={url}",
        "+model=m",
        "+save_results=false",
        *QUICK,
        "+sample_size=2",
        "+min_batches=2",
        "+max_batches=2",
        "+start=1",
        "+max_parallelism=2",
    ],
}
"""Every command path that sends HTTP requests. (The engine's ``/health`` wait and ``/metrics``
scrapes go through :func:`gymbench.engine_metrics.fetch_metrics_text`, tried below in every mode.)"""
CLIENT_MODULES = {
    # modules of gymbench that open HTTP connections -> the paths above that reach them, or why none
    "gymbench/builtin/http_client.py": "every path: the one client session",
    "gymbench/builtin/openai_backend.py": "collect-openai, collect-openai-chat-stream, tune-probes",
    "gymbench/builtin/nemo_gym_backend.py": "collect-nemo-gym-agent-run",
    "gymbench/builtin/nemo_gym_head.py": "collect-nemo-gym-head",
    "gymbench/calibrate/loadgen.py": "calibrate-sim",
    "gymbench/calibrate/measure.py": "calibrate-sim",
    "gymbench/engine_metrics.py": "collect-metrics-watch; test_every_scrape_and_health_check_is_bounded",
    "gymbench/engine/server.py": "its /health wait: test_every_scrape_and_health_check_is_bounded (answers_ok)",
    "gymbench/sim/launcher.py": "the simulator's own start-up check (answers_ok), the server it started itself",
    "gymbench/engine/nemo_gym_stack.py": "ng_run readiness and /server_instances (fetch_metrics_text)",
    "gymbench/tune/capacity.py": "tune-probes: llama.cpp's /props read (fetch_metrics_text)",
    "gymbench/report/browser.py": "a headless browser opening a report file gymbench wrote",
}
ALL_MODES = (*MODES, *STAGE_MODES)
CLIENT_WORDS = re.compile(
    r"RetryingClient|fetch_metrics_text|answers_ok|ClientSession\(|aiohttp\.request|socket\.create_connection|urllib\.request|"
    r"http\.client"
)


@pytest.fixture(scope="module")
def hostile() -> Iterator[Urls]:
    echo, stages = start_hostile_server([SECRET]), start_stage_server()
    servers: dict[str, HostileServer] = {**{mode: echo for mode in MODES}, **{mode: stages for mode in STAGE_MODES}}
    yield lambda mode: servers[mode].url(mode)
    echo.stop()
    stages.stop()


def client_cases() -> list[ContractCase]:
    cases = []
    for path, argv in CLIENT_PATHS.items():
        for mode in ALL_MODES:

            def build(
                root: Path, env: Env, argv: Callable[[Path, str], list[str]] = argv, mode: str = mode
            ) -> list[str]:
                assert env.urls is not None
                return argv(root, env.urls(mode))

            cases.append(
                ContractCase(
                    f"client/{path}:{mode}",
                    build,
                    (0, 1, 2),
                    environ=(KEY_ENV,),
                    outputs=("o.jsonl", "o.jsonl.run.json", "o.jsonl.metrics.json", "o_failures.jsonl"),
                )
            )
    return cases


SLOW_MODES = ("hang_accept", "hang_headers", "hang_body", "trickle", "huge_body")
"""Modes that end at a deadline (the preflight's three tries of 10 s): about 35 s each."""
SLOW_IN_SAMPLE = 2


def sampled(cases: list[ContractCase], seed: int = 41) -> list[ContractCase]:
    """Every quick mode once, every path at least once, and a seeded two of the slow modes
    (``tune`` only with a refusal: against a server that answers, it tunes for real)."""
    rng = random.Random(seed)
    paths = [path for path in CLIENT_PATHS if path != "tune-probes"]
    rng.shuffle(paths)
    modes = [mode for mode in ALL_MODES if mode not in SLOW_MODES] + rng.sample(SLOW_MODES, SLOW_IN_SAMPLE)
    chosen = {f"client/{paths[i % len(paths)]}:{mode}" for i, mode in enumerate(modes)}
    chosen.add("client/tune-probes:status_malformed")
    chosen.add("client/collect-openai:huge_body")  # the preflight read an endless answer whole (6 GB in 30 s)
    return [case for case in cases if case.id in chosen]


CASES = client_cases()


def check(
    case: ContractCase,
    tmp_path: Path,
    env: Env,
    hostile: Urls,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    env.urls = hostile
    result = run_contract(case, tmp_path, env, capsys, monkeypatch)
    tally(case, result)
    assert not result.problems, f"{case.id}: {result.summary()}"


@pytest.mark.parametrize("case", as_params(CASES, sampled(CASES)))
def test_client_paths_against_hostile_servers(
    case: ContractCase,
    tmp_path: Path,
    env: Env,
    hostile: Urls,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    check(case, tmp_path, env, hostile, capsys, monkeypatch)


@pytest.mark.parametrize("mode", ALL_MODES)
def test_every_scrape_and_health_check_is_bounded(mode: str, hostile: Urls) -> None:
    """``/metrics`` scrapes and the engine's ``/health`` wait: an answer or one ScrapeFailed, within
    the deadline they are given (the bound here is that deadline's, many times over)."""
    from gymbench.engine_metrics import ScrapeFailed, answers_ok, fetch_metrics_text

    root = hostile(mode).removesuffix("/v1")
    started = time.monotonic()
    answers_ok(root + "/health", deadline_s=2)
    try:
        text = fetch_metrics_text(root + "/metrics", deadline_s=2, max_bytes=1 << 20)
    except ScrapeFailed as exc:
        assert "\n" not in str(exc) and SECRET not in str(exc)
    else:
        assert len(text) <= 1 << 20
    assert time.monotonic() - started < HANG_S, "a scrape with a 2 s deadline ran past the hang bound"


def test_every_http_client_module_is_in_reach() -> None:
    found = {
        str(path.relative_to(PACKAGE.parent)) for path in PACKAGE.rglob("*.py") if CLIENT_WORDS.search(path.read_text())
    }
    missing = sorted(found - set(CLIENT_MODULES))
    assert not missing, (
        "modules that open HTTP connections, not in CLIENT_MODULES (tests/fuzz/test_client_paths.py): "
        + (", ".join(missing))
    )
    assert not set(CLIENT_MODULES) - found, (
        f"CLIENT_MODULES names modules that no longer exist: {set(CLIENT_MODULES) - found}"
    )
    sample = sampled(CASES)
    assert {case.id.split(":")[-1] for case in sample} >= set(ALL_MODES) - set(SLOW_MODES)
    assert {case.id.split(":")[0] for case in sample} == {f"client/{path}" for path in CLIENT_PATHS}
