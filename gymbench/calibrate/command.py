"""``gymbench calibrate-sim --from URL``: measure a real engine, write a simulator profile.

A command of its own rather than a mode of ``sim-server``: it talks to another server and writes
a file, and none of the simulator's own settings apply to it.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

from gymbench.builtin.backend_settings import OpenAISettings
from gymbench.settings import at_least, doc, require, with_defaults

if TYPE_CHECKING:
    from tqdm import tqdm

    from gymbench.plugins import Plugins


@dataclass
class CalibrateSettings(OpenAISettings):
    """The ``openai`` backend's settings (the engine's URL, model, API, streaming, key, timeouts:
    the calibration loads the engine through that backend, as ``collect`` does) and the calibration's own."""

    output: str = field(default="engine.yaml", metadata=doc("profile to write", path=True))
    engine_slots: int | None = field(
        default=None,
        metadata=doc("the engine's slot count, when /props does not give it (llama.cpp's -np)", was="slots"),
    )
    concurrencies: str | None = field(
        default=None, metadata=doc("closed-loop client counts to measure, e.g. 1,2,4,8 (default: around the slots)")
    )
    prompt_words: int = field(default=24, metadata=doc("words in the workload's prompt"))
    output_tokens: int | None = field(
        default=None,
        metadata=doc(
            "output tokens per request, sent as the task's max_output_tokens (ignore_eos: always this many); "
            "unset: none sent, the engine's own default, as collect does for a task that sets none",
            was="max_tokens",
        ),
    )
    load_warmup_s: float = field(default=2.0, metadata=doc("seconds at each load before measuring", was="warmup_s"))
    window_s: float = field(default=8.0, metadata=doc("seconds measured at each load"))
    passes: int = field(
        default=2,
        metadata=doc("measure the loads this many times, every other pass in reverse order; a load's rate is the mean"),
    )
    """2 (ABBA order): a machine whose speed drifts during the calibration (2-8% between minutes
    on this project's 2-core VM) would otherwise tilt the measured curve, and the knee of a curve
    that flattens slowly moves far with a tilt of a few percent. In reverse order every load's two
    readings straddle the middle of the calibration, so a steady drift cancels in their mean. It
    doubles the loads' time (about 40 s more for 4 slots, 80 s for 64 at the default window)."""
    extra_passes: int = field(
        default=2,
        metadata=doc(
            "passes added, two at a time, while a load's passes disagree (their mean's standard error above "
            "5% of it); 0: never"
        ),
    )
    """2: one more ABBA round where the machine's speed moved between the passes. A 4-slot llama.cpp
    calibration whose passes read -26.6% ... +12.8% apart put the simulator's knee at 1.9 against the
    engine's 4.6; a calibration's summary had said so, and nothing else did (issue 39). At most
    doubles the loads' time, and only where the passes disagree."""
    progress: bool = field(default=True, metadata=doc("show a progress bar"))

    def __post_init__(self) -> None:
        one = isinstance(self.base_url, str) and bool(self.base_url)  # a list of replicas: calibrate one at a time
        require(one, "base_url", self.base_url, "one engine's URL: --from http://HOST:PORT/v1")
        super().__post_init__()
        at_least("engine_slots", self.engine_slots, 1)
        at_least("prompt_words", self.prompt_words, 1)
        at_least("output_tokens", self.output_tokens, 2)
        require(self.load_warmup_s >= 0, "load_warmup_s", self.load_warmup_s, "seconds, 0 or more")
        require(self.window_s > 0, "window_s", self.window_s, "seconds above 0")
        at_least("passes", self.passes, 1, 10)
        at_least("extra_passes", self.extra_passes, 0, 8)
        require(self.extra_passes % 2 == 0, "extra_passes", self.extra_passes, "an even count (passes come in pairs)")
        parse_concurrencies(self.concurrencies)

    def points(self) -> list[int] | None:
        return parse_concurrencies(self.concurrencies)


CalibrateSettings = with_defaults(  # type: ignore[misc]
    CalibrateSettings,
    {"request_timeout_s": "seconds a calibration request may take, the first one included (> 0)"},
    api="chat",
    max_retries=1,
    backoff_base_s=0.0,
    request_timeout_s=60.0,
)
"""llama.cpp reports its per-request ``timings`` on chat completions: the calibration asks there
unless told otherwise (``+api=responses``). One immediate retry: llama.cpp closes a connection after
a streamed answer, and a pooled one reused just then fails before the request is sent; a request
that fails twice counts as failed, and no backoff wait lands in a client's measured cycle.

60 s a request, not collect's 300: a request that takes longer than a load's longest window
(``window_s`` doubled up to 8 times, 64 s by default) can never be measured, and a load waits for
the requests it has in flight; an engine that stops answering is then found within a minute or two,
not ten."""


def parse_concurrencies(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        values = sorted({int(part) for part in str(text).split(",") if part.strip()})
    except ValueError:
        values = []
    require(bool(values) and values[0] >= 1, "concurrencies", text, "client counts of 1 or more, e.g. 1,2,4,8")
    return values


def configure(parser: argparse.ArgumentParser) -> None:
    from gymbench.settings import add_settings_arguments

    parser.epilog = "example: gymbench calibrate-sim --from http://127.0.0.1:8080/v1 +output=engine.yaml"
    add_settings_arguments(parser, CalibrateSettings)
    parser.add_argument("--from", dest="setting_base_url", metavar="URL", help="the engine to measure (as +base_url)")


def run(args: argparse.Namespace, plugins: Plugins) -> int:
    from gymbench.settings import settings_from_args

    return calibrate(settings_from_args(CalibrateSettings, args), plugins)


def calibrate(settings: CalibrateSettings, plugins: Plugins) -> int:
    import asyncio

    from gymbench.calibrate.measure import default_concurrencies, measure
    from gymbench.calibrate.profile import build_profile
    from gymbench.jsonio import check_writable_file
    from gymbench.sim.profile import write_profile

    assert isinstance(settings.base_url, str), "one URL: the settings check"
    check_writable_file(settings.output, "profile", "+output")
    phases = settings.passes * len(settings.points() or default_concurrencies(settings.engine_slots or 4))
    progress = Progress(settings.progress, phases + 1)
    try:
        measured = asyncio.run(
            measure(settings, on_phase=progress.phase, say=progress.say, engines=plugins.engine_metrics())
        )
    finally:
        progress.close()
    sim, record = build_profile(
        measured,
        base_url=settings.base_url,
        prompt_words=settings.prompt_words,
        warmup_s=settings.load_warmup_s,
        window_s=settings.window_s,
    )
    path = write_profile(settings.output, sim, record)
    _summary(sim, record, str(path))
    return 0


class Progress:
    """The calibration's progress: a bar on a terminal, a line per phase elsewhere (a log, CI), and
    before each wait on the engine, a line saying what it waits for; nothing with ``+progress=false``."""

    def __init__(self, shown: bool, phases: int) -> None:
        from tqdm import tqdm

        self.shown, self.phases, self.done = shown, phases, 0
        self.bar: tqdm[NoReturn] = tqdm(total=phases, desc="calibrating", unit="phase", disable=None if shown else True)

    def say(self, text: str) -> None:
        if self.shown:
            self.bar.write(f"calibrate-sim: {text}", file=sys.stderr)

    def phase(self, label: str, seconds: float) -> None:
        self.done += 1
        if self.done > self.phases:  # passes added where the first ones disagreed
            self.phases = self.bar.total = self.done
        if self.bar.disable:  # no terminal: a line for each phase instead of the bar
            self.say(f"{label} ({self.done} of {self.phases} phases)")
        self.bar.set_postfix_str(label)
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()


def _summary(sim: dict[str, Any], record: dict[str, Any], path: str) -> None:
    fit = record["fit"]
    curve = ", ".join(f"{n}: {1e3 * s:.3g}" for n, s in sorted((sim.get("step_curve_s") or {}).items()))
    print(
        f"engine: {record['engine']}, {sim['max_num_seqs']} slots; step {{{curve}}} ms by running sequences "
        f"(line: {fit['a_ms']:g} ms + {fit['b_ms_per_seq']:g} ms/seq); "
        f"prefill {fit['c_ms_per_engine_prompt_token'] * 1e3:g} µs/token"
    )
    print(f"{'p':>4} {'engine req/s':>13} {'simulated':>10} {'error':>7} {'failed':>7}")
    for row in record["check"]:
        print(
            f"{row['concurrency']:>4} {row['requests_per_s']:>13.3f} {row['simulated_requests_per_s']:>10.3f} "
            f"{row['error_pct']:>+6.1f}% {row['errors']:>7}"
        )
    passes = [row["requests_per_s_passes"] for row in record["check"] if row.get("requests_per_s_passes")]
    spread = [100 * (rates[-1] / rates[0] - 1) for rates in passes]
    if spread:
        print(
            f"the last pass against the first: {min(spread):+.1f}% … {max(spread):+.1f}% by load "
            "(each load's rate is the passes' mean; a wide spread: the machine's speed drifted)"
        )
    for note in record.get("notes", []):
        print(f"note: {note}")
    print(f"wrote {path}: run the simulator from it with gymbench sim-server +profile={path}")
