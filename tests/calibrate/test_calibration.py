"""A simulator calibrated from a real engine (issue 23, item 5): the fit, the profile, the command.

Nothing here reads a wall clock: the fit is checked on synthetic measurements, the profile's
effect on the simulator in simulated time, and the command against a stand-in of llama.cpp's
server whose timings are computed from a known model.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import yaml

from gymbench.calibrate.command import CalibrateSettings
from gymbench.calibrate.fit import DecodePoint, PrefillPoint, fit_steps
from gymbench.calibrate.loadgen import Answer, LoadResult, disagreeing, merge_passes
from gymbench.calibrate.measure import measure
from gymbench.cli import main
from gymbench.client_cycles import ClientCycles, closed_loop_rate
from gymbench.errors import GymbenchError
from gymbench.sim.config import config_from_preset, load_profile
from gymbench.sim.profile import public_url, write_profile
from gymbench.sim.virtual_load import simulated_closed_loop
from gymbench.testing import make_plugins
from tests.sim.fake_llama import StepModel, fake_llama_server

PROFILE = {"max_num_seqs": 4, "step_base_s": 0.004, "step_per_seq_s": 0.002, "prefill_per_token_s": 0.0,
           "output_tokens_dist": "max_tokens", "output_tokens_mean": 16}  # fmt: skip


def profile_file(tmp_path: Path, sim: dict | None = None, **extra: object) -> Path:
    path = tmp_path / "engine.yaml"
    write_profile(path, sim or PROFILE, {"engine": "test"})
    if extra:
        document = yaml.safe_load(path.read_text())
        path.write_text(yaml.safe_dump(document | extra))
    return path


# --- the fit


def test_the_fit_recovers_known_coefficients_from_synthetic_measurements() -> None:
    a, b, c, out = 3.0, 0.7, 0.015, 32
    prefill = [PrefillPoint(n, a + c * n + noise) for n in (20, 150, 400) for noise in (-0.05, 0.05)]
    decode = [
        DecodePoint(k, a + b * k + c * 30 * (k - 1) / out + noise, 30, out)
        for k in (1, 2, 4, 8, 16)
        for noise in (-0.02, 0.0, 0.02)
    ]
    fit = fit_steps(prefill, decode)
    assert fit.base_ms == pytest.approx(a, rel=0.02)
    assert fit.per_seq_ms == pytest.approx(b, rel=0.02)
    assert fit.per_prompt_token_ms == pytest.approx(c, rel=0.02)
    assert max(abs(r) for r in fit.decode_residuals_ms) < 0.05


def test_a_concave_step_is_kept_as_measured_where_a_line_would_miss_it() -> None:
    """llama.cpp's step on a CPU bends (0.5, 0.85, 1.1 ms at 1, 2, 4 sequences): the curve keeps
    each load's step (less the others' prefills); the line's residuals show what it would miss."""
    out, prompt, c = 64, 30, 0.01
    steps = {1: 0.5, 2: 0.85, 4: 1.1, 8: 1.3}
    decode = [DecodePoint(n, ms + c * prompt * (n - 1) / out, prompt, out) for n, ms in steps.items()]
    fit = fit_steps([PrefillPoint(n, 0.2 + c * n) for n in (20, 150, 400)], decode)
    assert fit.curve_ms == pytest.approx(steps, rel=1e-6)
    assert max(abs(r) for r in fit.decode_residuals_ms) > 0.1  # a line through these misses by > 0.1 ms


def test_a_curve_sets_the_simulators_step() -> None:
    """The simulator steps as the curve says, between its points and beyond the last."""
    from gymbench.sim.config import SimConfig

    out = 16
    config = SimConfig(max_num_seqs=8, step_curve_s={1: 0.004, 2: 0.005, 4: 0.006}, step_base_s=0.5,
                       prefill_per_token_s=0.0, output_tokens_dist="max_tokens", output_tokens_mean=out)  # fmt: skip
    assert [config.decode_step_s(n) for n in (1, 3, 4, 6)] == pytest.approx([0.004, 0.0055, 0.006, 0.007])
    for p, step in ((1, 0.004), (3, 0.0055), (6, 0.007)):
        load = simulated_closed_loop(config, p, prompt_tokens=8, output_tokens=out, window_s=20)
        assert load.mean_latency_s == pytest.approx(out * step, rel=0.01)  # step_base_s is not used


@pytest.mark.parametrize("curve", [{0: 0.001}, {1: -0.001}, {2: float("nan")}])
def test_a_bad_step_curve_is_refused(curve: dict) -> None:
    from gymbench.sim.config import SimConfig

    with pytest.raises(GymbenchError, match="step_curve_s"):
        SimConfig(step_curve_s=curve)


def test_calibrating_a_concave_engine_recovers_its_step_curve(tmp_path: Path) -> None:
    """Against a stand-in whose step bends (2, 2.6, 2.9 ms at 1, 2, 3 sequences), the profile keeps
    the bend. The stand-in's timings are computed; only how often the clients overlap depends on
    the machine (a request of 32 tokens lasts about 80 ms, far longer than its HTTP round trip)."""
    curve = (2.0, 2.6, 2.9)
    engine = StepModel(slots=3, a_ms=0.5, c_ms=0.0, curve_ms=curve, sleep_scale=1.0)
    out = tmp_path / "engine.yaml"
    with fake_llama_server(engine) as url:
        code = main(["calibrate-sim", "--from", url, f"+output={out}", "+concurrencies=1,2,3",
                     "+load_warmup_s=0.2", "+window_s=1.5", "+output_tokens=32", "+progress=false"])  # fmt: skip
    assert code == 0
    sim = yaml.safe_load(out.read_text())["sim"]
    measured = {n: 1e3 * s for n, s in sim["step_curve_s"].items()}
    assert measured == pytest.approx({1: 2.0, 2: 2.6, 3: 2.9}, rel=0.1)


def test_the_fit_never_gives_a_negative_cost() -> None:
    """A step time that falls with more sequences (noise) fits as zero slope, not a negative one."""
    decode = [DecodePoint(k, 5.0 - 0.01 * k, 10, 16) for k in (1, 2, 4)]
    fit = fit_steps([], decode)
    assert fit.per_seq_ms == 0.0 and fit.base_ms > 0


# --- the profile in the simulator


def test_a_profile_sets_the_simulator_and_explicit_settings_still_win(tmp_path: Path) -> None:
    path = profile_file(tmp_path)
    config = config_from_preset(None, {}, str(path))
    assert (config.max_num_seqs, config.step_base_s, config.step_per_seq_s) == (4, 0.004, 0.002)
    assert config_from_preset(None, {"max_num_seqs": 8}, str(path)).max_num_seqs == 8


def test_the_profile_changes_the_simulators_throughput_as_the_fit_says(tmp_path: Path) -> None:
    """Below the slots a request takes L steps of a + b·p; beyond them the slots are the limit."""
    config = config_from_preset(None, {}, str(profile_file(tmp_path)))
    out = 16
    for p in (1, 2, 4):
        step = 0.004 + 0.002 * p
        load = simulated_closed_loop(config, p, prompt_tokens=8, output_tokens=out, window_s=20)
        assert load.requests_per_s == pytest.approx(p / (out * step), rel=0.02)
        assert load.mean_latency_s == pytest.approx(out * step, rel=0.01)
    at_slots = simulated_closed_loop(config, 4, prompt_tokens=8, output_tokens=out, window_s=20).requests_per_s
    beyond = simulated_closed_loop(config, 12, prompt_tokens=8, output_tokens=out, window_s=20)
    assert beyond.requests_per_s == pytest.approx(at_slots, rel=0.02)
    assert beyond.mean_ttft_s > 2 * out * (0.004 + 0.002 * 4)  # queued for about two slot turns


def test_sim_server_describe_reads_the_profile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = profile_file(tmp_path)
    assert main(["sim-server", f"+profile={path}", "--describe", "--json"]) == 0
    import json

    described = json.loads(capsys.readouterr().out)
    assert described["config"]["max_num_seqs"] == 4 and described["config"]["step_per_seq_s"] == 0.002
    assert described["capacity"]["limited_by"] == "max_num_seqs"


@pytest.mark.parametrize(
    ("sim", "extra", "expected"),
    [
        ({"step_base_s": -1.0}, {}, r"engine\.yaml: sim\.step_base_s: .*must not be negative"),
        ({"step_base_s": 1.0e308}, {}, r"engine\.yaml: sim\.step_base_s: .*must be at most 60 s, got 1e\+308"),
        ({"step_curve_s": {1: 0.001, 2: 1.0e9}}, {}, r"engine\.yaml: sim\.step_curve_s: .*at most 60 s"),
        ({"max_seqs": 3}, {}, r"engine\.yaml: sim\.max_seqs: unknown simulator setting"),
        ({"max_num_seqs": "many"}, {}, r"engine\.yaml: sim\.max_num_seqs: .*\(many\), expected a whole number"),
        (PROFILE, {"format": "other/9"}, r"engine\.yaml: format: expected"),
        (PROFILE, {"extra": 1}, r"engine\.yaml: unknown key 'extra'"),
    ],
)
def test_a_bad_profile_is_one_error_naming_the_file_and_key(
    tmp_path: Path, sim: dict, extra: dict, expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = profile_file(tmp_path, sim, **extra)
    with pytest.raises(GymbenchError, match=expected):
        load_profile(path)
    assert main(["sim-server", f"+profile={path}", "--describe"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("gymbench: error:") and "\n" not in err and str(path) in err


def test_a_missing_profile_and_collects_setting(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tasks = tmp_path / "t.jsonl"
    tasks.write_text('{"responses_create_params": {"input": "1+1"}, "expected_answer": "2"}\n')
    code = main(["collect", f"+input_jsonl_fpath={tasks}", f"+output_jsonl_fpath={tmp_path / 'o.jsonl'}",
                 f"+sim_profile={tmp_path / 'none.yaml'}", "+progress=false", "+save_results=false"])  # fmt: skip
    assert code == 2 and "none.yaml: no such settings file" in capsys.readouterr().err


def test_collects_embedded_simulator_takes_the_profile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = profile_file(tmp_path, PROFILE | {"model": "calibrated-tiny", "step_base_s": 0.001})
    tasks = tmp_path / "t.jsonl"
    tasks.write_text('{"responses_create_params": {"input": "1+1"}, "expected_answer": "2"}\n' * 3)
    out = tmp_path / "o.jsonl"
    code = main(["collect", f"+input_jsonl_fpath={tasks}", f"+output_jsonl_fpath={out}", f"+sim_profile={path}",
                 "+progress=false", "+save_results=false"])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    assert f"profile {path}" in capsys.readouterr().err
    assert len(out.read_text().splitlines()) == 3


def test_public_url_strips_credentials_and_query() -> None:
    assert public_url("http://user:pw@10.0.0.1:8080/v1?key=s#x") == "http://10.0.0.1:8080/v1"


# --- the command, against a stand-in of llama.cpp's server


@pytest.mark.parametrize("stream", ["false", "true"])
def test_calibrate_sim_writes_a_profile_the_simulator_loads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], stream: str
) -> None:
    out = tmp_path / "engine.yaml"
    with fake_llama_server(StepModel(slots=3)) as url:
        authed = url.replace("http://", "http://me:hunter2@")
        code = main(["calibrate-sim", "--from", authed, f"+output={out}", "+concurrencies=1,2,3,5",
                     "+load_warmup_s=0.2", "+window_s=0.6", "+output_tokens=4", "+progress=false",
                     f"+stream={stream}"])  # fmt: skip
    printed = capsys.readouterr()
    assert code == 0, printed.err
    document = yaml.safe_load(out.read_text())
    sim, record = document["sim"], document["calibration"]
    assert record["engine_limits"]["slots"] == 3 and 1 <= sim["max_num_seqs"] <= 3
    assert sim["model"] == "tiny" and sim["kv_cache_tokens"] == 3 * 512
    assert set(sim["step_curve_s"]) <= {1, 2, 3} and all(v > 0 for v in sim["step_curve_s"].values())
    assert sim["prefill_per_token_s"] > 0 and record["fit"]["a_ms"] > 0 and record["fit"]["b_ms_per_seq"] > 0
    assert record["fit"]["c_ms_per_engine_prompt_token"] == pytest.approx(0.02, rel=0.05)  # prefill is exact
    assert [row["concurrency"] for row in record["check"]] == [1, 2, 3, 5]
    assert all(row["simulated_requests_per_s"] > 0 and "p50_ms" in row["ttft"] for row in record["check"])
    assert "hunter2" not in out.read_text() and record["engine_url"].startswith("http://127.0.0.1:")
    assert {"date", "machine", "engine", "prefill"} <= set(record)
    assert config_from_preset(None, {}, str(out)).max_num_seqs == sim["max_num_seqs"]
    assert "engine req/s" in printed.out and f"+profile={out}" in printed.out


def test_the_closed_loops_come_before_the_prefill_requests(tmp_path: Path) -> None:
    """After prefill requests that skip llama.cpp's prompt cache, it served two identical requests
    one at a time (p = 2 read as p = 1), so the loads are measured first."""
    engine = StepModel(slots=2)
    with fake_llama_server(engine) as url:
        code = main(["calibrate-sim", "--from", url, f"+output={tmp_path / 'p.yaml'}", "+concurrencies=1,2",
                     "+load_warmup_s=0.1", "+window_s=0.3", "+output_tokens=4", "+progress=false"])  # fmt: skip
    assert code == 0
    order = engine.cache_prompt
    assert True in order and False in order
    assert order == sorted(order, reverse=True)  # every loop request (cached) before any prefill one


def test_calibrate_sim_without_slots_is_one_clear_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from aiohttp import web  # noqa: F401 - the stand-in needs it

    with fake_llama_server(StepModel(slots=2)) as url:
        code = main(["calibrate-sim", "--from", url.replace("/v1", "/nothing/v1"), f"+output={tmp_path / 'p.yaml'}",
                     "+progress=false"])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code == 2 and "gives no total_slots" in err and "+engine_slots=N" in err and "\n" not in err


# --- the real engine


@pytest.mark.real_engine
def test_calibrating_a_real_llama_server(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.sim.real_llama import running_llama_server

    with running_llama_server(slots=2) as url:
        out = tmp_path / "engine.yaml"
        code = main(["calibrate-sim", "--from", url, f"+output={out}", "+concurrencies=1,2,3",
                     "+load_warmup_s=1", "+window_s=3", "+output_tokens=8", "+progress=false"])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    sim = config_from_preset(None, {}, str(out))
    record = yaml.safe_load(out.read_text())["calibration"]
    assert record["engine_limits"]["slots"] == 2 and 1 <= sim.max_num_seqs <= 2  # slots == -np
    assert sim.step_base_s + sim.step_per_seq_s > 0 and sim.step_per_seq_s >= 0 and sim.prefill_per_token_s > 0
    assert record["engine"].startswith("llama.cpp") and len(record["check"]) == 3
    assert all(row["requests"] > 0 for row in record["check"])


def test_a_throughput_ceiling_the_timings_miss_is_fitted_as_a_per_request_cost() -> None:
    """Loads measured from a simulator that pays 3 ms per request more than the timings say: the fit
    finds the 3 ms; loads the timings explain already give zero."""
    from gymbench.calibrate.loadgen import LoadResult
    from gymbench.calibrate.measure import EngineFacts, Measurements, prompt_text
    from gymbench.calibrate.profile import fit_throughput
    from gymbench.sim.capacity import describe
    from gymbench.sim.config import SimConfig
    from gymbench.sim.text import count_tokens

    words, out = 24, 64
    prompt = count_tokens(prompt_text(words))
    timed = SimConfig(max_num_seqs=64, step_base_s=0.0003, step_per_seq_s=0.0002, prefill_per_token_s=0.0,
                      output_tokens_dist="max_tokens", output_tokens_mean=out)  # fmt: skip
    for hidden_ms in (3.0, 0.0):
        truth = timed.replace(prefill_per_token_s=hidden_ms / 1e3 / prompt)
        capacity = describe(truth, prompt_tokens=prompt, max_tokens=out)
        points = []
        for n in (1, 2, 16, 32, 64, 80):
            point = LoadResult(n, 1000.0)
            point.answers = [Answer(0.0, None, 1.0, {})] * round(1000 * capacity.throughput_at(truth, n))
            points.append(point)
        measured = Measurements(EngineFacts("", "m", 64, None, ""), [], points, 0.0)
        seqs, cost = fit_throughput(timed, measured, words, out)
        assert seqs == 64 and cost == pytest.approx(hidden_ms, abs=0.05)


def test_a_machine_that_fills_before_the_slots_is_fitted_as_fewer_effective_sequences() -> None:
    """Loads from an engine whose ceiling comes at 6 clients though it has 64 slots."""
    from gymbench.calibrate.loadgen import LoadResult
    from gymbench.calibrate.measure import EngineFacts, Measurements, prompt_text
    from gymbench.calibrate.profile import fit_throughput
    from gymbench.sim.capacity import describe
    from gymbench.sim.config import SimConfig
    from gymbench.sim.text import count_tokens

    words, out = 24, 64
    prompt = count_tokens(prompt_text(words))
    timed = SimConfig(max_num_seqs=64, step_base_s=0.0003, step_per_seq_s=0.0002, prefill_per_token_s=0.0,
                      output_tokens_dist="max_tokens", output_tokens_mean=out)  # fmt: skip
    truth = timed.replace(max_num_seqs=6)
    capacity = describe(truth, prompt_tokens=prompt, max_tokens=out)
    points = []
    for n in (1, 2, 4, 8, 16, 32, 64, 80):
        point = LoadResult(n, 1000.0)
        point.answers = [Answer(0.0, None, 1.0, {})] * round(1000 * capacity.throughput_at(truth, n))
        points.append(point)
    measured = Measurements(EngineFacts("", "m", 64, None, ""), [], points, 0.0)
    seqs, cost = fit_throughput(timed, measured, words, out)
    assert seqs == 6 and cost == pytest.approx(0.0, abs=0.05)


def test_a_load_in_which_nothing_finished_is_measured_again_with_a_longer_window(tmp_path: Path) -> None:
    """Requests of about 0.4 s and a 0.1 s window: the window doubles until answers land in it,
    instead of failing (a slow engine, or a loaded machine, as in CI's quick mode)."""
    engine = StepModel(slots=1, a_ms=100.0, b_ms=0.0, c_ms=0.0, sleep_scale=1.0)
    out = tmp_path / "slow.yaml"
    with fake_llama_server(engine) as url:
        code = main(["calibrate-sim", "--from", url, f"+output={out}", "+concurrencies=1",
                     "+load_warmup_s=0", "+window_s=0.1", "+output_tokens=4", "+progress=false"])  # fmt: skip
    assert code == 0
    check = yaml.safe_load(out.read_text())["calibration"]["check"]
    assert check[0]["requests"] >= 1


@pytest.mark.parametrize("window_s", [0.45, 0.5, 0.55, 0.6, 0.7])
def test_a_closed_loop_rate_is_not_quantised_by_batches_finishing_together(tmp_path: Path, window_s: float) -> None:
    """Four requests sent together with equal lengths finish together, every 0.192 s: a window of
    0.45-0.7 s holds two or three whole batches, so counting what finishes in it reads 14-27
    requests/s where the engine does 20.8. Each client's whole cycles read the engine's rate."""
    config = config_from_preset(None, {}, str(profile_file(tmp_path)))
    out, p = 16, 4
    truth = p / (out * (0.004 + 0.002 * p))
    load = simulated_closed_loop(config, p, prompt_tokens=8, output_tokens=out, window_s=window_s)
    assert load.requests_per_s == pytest.approx(truth, rel=0.02)


def test_a_window_shorter_than_a_cycle_has_no_cycle_rate() -> None:
    whole, empty = ClientCycles(), ClientCycles()
    whole.cycle(0.0, 0.5, ok=True)
    whole.cycle(0.5, 1.0, ok=False)  # a failed request's time counts, not the request
    assert closed_loop_rate([whole]) == pytest.approx(1.0)
    assert closed_loop_rate([whole, empty]) is None
    assert closed_loop_rate([]) is None


def test_two_passes_measure_the_loads_in_abba_order_and_each_rate_is_their_mean(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The default: every load twice, the second pass in reverse order (1, 2, 3, 3, 2, 1), so a
    drift that is steady over the calibration cancels in each load's mean; the profile keeps both
    readings, and the summary says how far they were apart. (No passes added here: 0.3 s windows on
    a busy machine may disagree, and the next test is about that.)"""
    out = tmp_path / "engine.yaml"
    measured: list[str] = []
    with fake_llama_server(StepModel(slots=3)) as url:
        code = main(["calibrate-sim", "--from", url, f"+output={out}", "+concurrencies=1,2,3", "+extra_passes=0",
                     "+load_warmup_s=0.1", "+window_s=0.4", "+output_tokens=4", "+progress=false"])  # fmt: skip
        facts = asyncio.run(
            measure(CalibrateSettings(base_url=url, concurrencies="1,2,3", prompt_words=4, output_tokens=4,
                                      load_warmup_s=0.0, window_s=0.3, passes=3, extra_passes=0),
                    on_phase=lambda label, _: measured.append(label.split(":")[0]),
                    engines=make_plugins().engine_metrics())
        )  # fmt: skip
    assert code == 0
    assert measured == ["p=1", "p=2", "p=3", "p=3", "p=2", "p=1", "p=1", "p=2", "p=3", "prefill"]
    assert [len(point.pass_rates) for point in facts.points] == [3, 3, 3]
    document = yaml.safe_load(out.read_text())
    record = document["calibration"]
    assert record["workload"]["passes"] == 2
    for row in record["check"]:
        first, second = row["requests_per_s_passes"]
        assert row["requests_per_s"] == pytest.approx((first + second) / 2, abs=1e-3)
    assert "the last pass against the first" in capsys.readouterr().out


def test_passes_that_disagree_are_followed_by_two_more_and_the_notes_say_so() -> None:
    """The engine runs 2.5x slower from the second pass on (the machine got busy): the two passes
    disagree far beyond ±5%, so two more are measured, in ABBA order again; they still disagree
    with the first, and after the ``extra_passes`` allowed the calibration says so instead of
    measuring on."""
    model = StepModel(slots=3)
    measured: list[str] = []

    def phase(label: str, _: float) -> None:
        measured.append(label.split(":")[0])
        if len(measured) == 3:  # the first pass is over
            model.slowdown[0] = 2.5

    with fake_llama_server(model) as url:
        facts = asyncio.run(
            measure(CalibrateSettings(base_url=url, concurrencies="1,2,3", prompt_words=4, output_tokens=4,
                                      load_warmup_s=0.0, window_s=0.3),
                    on_phase=phase, engines=make_plugins().engine_metrics())
        )  # fmt: skip
    abba = ["p=1", "p=2", "p=3", "p=3", "p=2", "p=1"]
    assert measured == [*abba, *abba, "prefill"]
    assert facts.passes == 4 and [len(point.pass_rates) for point in facts.points] == [4, 4, 4]
    added, still = facts.notes[-2:]
    assert added.startswith("passes 3-4 added: after 2, the passes disagreed beyond ±5%")
    assert still.startswith("after 4 passes some loads' passes still disagree beyond ±5%")


def test_loads_whose_passes_disagree_are_those_whose_mean_is_known_worse_than_five_percent() -> None:
    def load(concurrency: int, *rates: float) -> LoadResult:
        return LoadResult(concurrency, 8.0, pass_rates=list(rates))

    readings = {
        1: [load(1, 30.0), load(1, 31.0)],  # ±1.6%: agree
        4: [load(4, 60.0), load(4, 48.0)],  # ±11.1%
        8: [load(8, 60.0), load(8, 55.0), load(8, 58.0), load(8, 61.0)],  # ±2.2%
        16: [load(16, 62.0)],  # read once: says nothing
    }
    spread = disagreeing(readings)
    assert list(spread) == [4] and spread[4] == pytest.approx(6 / 54, rel=1e-6)


def test_merged_passes_keep_every_answer_and_average_the_rates() -> None:
    def load(rate: int, answers: int, errors: int = 0) -> LoadResult:
        client = ClientCycles()
        for _ in range(rate):  # ``rate`` requests over one second
            client.cycle(0.0, 1.0, ok=True)
        return LoadResult(4, 8.0, [Answer(0.0, None, 1.0, {})] * answers, errors, [client])

    early, late = load(60, 1, errors=1), load(50, 2)
    assert (early.requests_per_s, late.requests_per_s) == (60.0, 50.0)
    merged = merge_passes([early, late])
    assert merged.pass_rates == [60.0, 50.0] and merged.requests_per_s == pytest.approx(55.0)
    assert len(merged.answers) == 3 and merged.errors == 1 and merged.window_s == 16.0
    assert merge_passes([early]) is early


def test_passes_below_one_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["calibrate-sim", "--from", "http://127.0.0.1:9/v1", f"+output={tmp_path / 'p.yaml'}", "+passes=0"])
    assert code != 0
    assert "passes" in capsys.readouterr().err


def test_calibrate_sim_sends_the_body_collect_sends_for_the_same_task(tmp_path: Path) -> None:
    """Without +output_tokens, the loads send no max_tokens: the engine's own default applies (the
    stand-in's ``-n``, 24 here), as when ``collect`` sends the same task, and the profile's output
    length is the one the engine generated. (calibrate-sim used to send 64 where collect sent none
    and llama.cpp generated its default 128.)"""
    import json

    from gymbench.calibrate.measure import prompt_text

    engine = StepModel(slots=2, default_max_tokens=24)
    out = tmp_path / "engine.yaml"
    with fake_llama_server(engine) as url:
        code = main(["calibrate-sim", "--from", url, f"+output={out}", "+concurrencies=1", "+passes=1",
                     "+load_warmup_s=0", "+window_s=0.3", "+prompt_words=12", "+progress=false"])  # fmt: skip
        assert code == 0
        calibrated = engine.bodies[0]
        tasks = tmp_path / "tasks.jsonl"
        task = {"input": [{"role": "user", "content": prompt_text(12)}], "temperature": 0.0}
        row = {"responses_create_params": task, "expected_answer": "x"}
        tasks.write_text(json.dumps(row) + "\n")
        engine.bodies.clear()
        code = main(["collect", f"+input_jsonl_fpath={tasks}", f"+output_jsonl_fpath={tmp_path / 'o.jsonl'}",
                     "+backend=openai", f"+base_url={url}", "+model=tiny", "+api=chat", "+extra_body.ignore_eos=true",
                     "+progress=false", "+save_results=false"])  # fmt: skip
        assert code == 0
        (collected,) = engine.bodies
    assert "max_tokens" not in calibrated
    assert calibrated == collected
    document = yaml.safe_load(out.read_text())
    assert document["sim"]["output_tokens_mean"] == 24
    assert document["calibration"]["workload"]["max_tokens"] == 24
    assert document["calibration"]["workload"]["max_tokens_sent"] is None


def test_the_loads_send_distinct_prompts_of_the_workloads_length(tmp_path: Path) -> None:
    """Each load request's prompt is its own, as a collection's tasks are, so that llama.cpp's prompt
    cache does not serve every prefill: one prompt repeated is not the workload the profile stands
    for (the real-engine truth sends distinct ones)."""
    engine = StepModel(slots=2, default_max_tokens=8)
    with fake_llama_server(engine) as url:
        code = main(["calibrate-sim", "--from", url, f"+output={tmp_path / 'engine.yaml'}", "+concurrencies=2",
                     "+passes=1", "+load_warmup_s=0", "+window_s=0.3", "+prompt_words=12",
                     "+progress=false"])  # fmt: skip
        assert code == 0
    loads = [body for body in engine.bodies if body.get("max_tokens") != 1][1:]  # past the first answer, not prefill
    prompts = [body["messages"][0]["content"] for body in loads]
    assert len(prompts) >= 4
    assert len(set(prompts)) == min(len(prompts), 64)  # the tasks in turn
    assert {len(prompt.split()) for prompt in prompts} == {13}  # 12 words and the task's number
    document = yaml.safe_load((tmp_path / "engine.yaml").read_text())
    assert document["calibration"]["workload"]["prompts"] == 64


def test_a_given_max_tokens_is_the_tasks_max_output_tokens(tmp_path: Path) -> None:
    engine = StepModel(slots=1)
    with fake_llama_server(engine) as url:
        code = main(["calibrate-sim", "--from", url, f"+output={tmp_path / 'e.yaml'}", "+concurrencies=1",
                     "+passes=1", "+load_warmup_s=0", "+window_s=0.2", "+output_tokens=6",
                     "+progress=false"])  # fmt: skip
    assert code == 0
    loads = [body for body in engine.bodies if body.get("cache_prompt", True)]
    assert loads and all(body["max_tokens"] == 6 and body["ignore_eos"] is True for body in loads)
    prefill = [body for body in engine.bodies if body.get("cache_prompt", True) is False]
    assert prefill and all(body["max_tokens"] == 1 and "stream" not in body for body in prefill)


def test_an_engine_that_is_not_there_is_one_clear_line_without_credentials(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["calibrate-sim", "--from", "http://me:hunter2@127.0.0.1:9/v1", f"+output={tmp_path / 'p.yaml'}",
                 "+progress=false"])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and "hunter2" not in err
    assert "cannot measure the engine at http://127.0.0.1:9" in err and "is it running?" in err


@pytest.mark.parametrize(
    ("props", "models", "slots", "model"),
    [
        ({"total_slots": 2, "default_generation_settings": None}, {"data": []}, 2, "model"),
        ({"total_slots": 3}, {"object": "list", "data": [{"id": "a"}, {"id": "b"}]}, 3, "a"),
        ({"total_slots": 4, "default_generation_settings": {"n_ctx": 512}}, {"data": [{"id": "m1"}]}, 4, "m1"),
    ],
)
def test_props_and_models_of_llama_cpps_shape_are_read(props: object, models: object, slots: int, model: str) -> None:
    """What llama.cpp gives, with its optional parts absent (or null); other shapes are one line each
    (tests/robustness/test_calibrate_hostile.py: they were an AttributeError and a KeyError, issue 41)."""
    from aiohttp import web
    from aiohttp.test_utils import TestServer

    from gymbench.calibrate.loadgen import settings_client
    from gymbench.calibrate.measure import read_facts

    async def facts() -> tuple[int, str]:
        async def answer_props(request: web.Request) -> web.Response:
            return web.json_response(props)

        async def answer_models(request: web.Request) -> web.Response:
            return web.json_response(models)

        app = web.Application()
        app.router.add_get("/props", answer_props)
        app.router.add_get("/v1/models", answer_models)
        async with TestServer(app, host="127.0.0.1") as server:
            url = f"http://127.0.0.1:{server.port}/v1"
            client = settings_client(CalibrateSettings(base_url=url))
            await client.open(None)
            try:
                found = await read_facts(client, url, None, None)
            finally:
                await client.close()
        return found.slots, found.model

    assert asyncio.run(facts()) == (slots, model)
