"""Every setting of every command, and every option of every built-in component, given bad values.

Values come from the field's type (wrong types, negatives, zero, nan/inf, huge, empty, ``${...}``),
a seeded sample per field, given as ``+key=value`` or as ``--key value``. Each case also sets a
*stopper*: something that fails once every setting has been checked (an output path that is a
directory, a missing input, an unwritable results directory) or ends the command at once
(``sim-server --describe``), so a value that is accepted never starts a long run. A value of the
wrong type must be refused naming the setting.
"""

from __future__ import annotations

import dataclasses
import random
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .bad_tasks import GOOD
from .cases import Case, Env, Prepared

HUGE = "9" * 5000
VALUES: dict[Any, list[str]] = {
    int: ["x", "1.5", "", "${oc.env:HOME}", "[1]", "{a: 1}", "nan", "inf", "-1", "0", "1e23",
          "99999999999999999999", HUGE, "true", "0x10"],
    float: ["x", "", "${x}", "[1]", "nan", "inf", "-inf", "-1", "0", "1e400", HUGE, "1e-320"],
    str: ["", "${x}", "${oc.env:HOME}", "../../x", "x" * 5000, "[1]", "{a: 1}", "a\x00b", " ", "-"],
    bool: ["maybe", "", "${x}", "[1]", "2", "-1", "x" * 5000],
    dict: ["5", "x", "[1, 2]", "", "null", "{a: [1, {b: ${x}}]}"],
}  # fmt: skip
WRONG_TYPE: dict[Any, set[str]] = {
    int: {"x", "1.5", "${oc.env:HOME}", "[1]", "{a: 1}", "nan", "inf", "1e23", "true"},
    float: {"x", "${x}", "[1]"},
    bool: {"maybe", "${x}", "[1]", "x" * 5000},
    dict: {"5", "x", "[1, 2]"},
}
PER_FIELD = 2


def kind_of(schema: type[Any], field: dataclasses.Field[Any]) -> Any:
    """int, float, str, bool or dict (``Optional`` unwrapped); None for anything else."""
    hint = typing.get_type_hints(schema)[field.name]
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        hint = args[0] if len(args) == 1 else None
    if typing.get_origin(hint) is dict or hint is dict:
        return dict
    return hint if hint in (int, float, str, bool) else None


def fuzzed_values(rng: random.Random, kind: Any) -> list[str]:
    """A seeded sample of the kind's bad values, always with one of the wrong type."""
    values = VALUES[kind]
    wrong = sorted(WRONG_TYPE.get(kind, set()))
    chosen = rng.sample(values, min(PER_FIELD, len(values)))
    if wrong and not set(chosen) & set(wrong):
        chosen[0] = rng.choice(wrong)
    return chosen


def spelled(rng: random.Random, key: str, value: str, kind: Any) -> list[str]:
    """``+key=value``, ``key=value`` or ``--key value`` (a flag exists for scalar settings only)."""
    form = rng.randrange(3) if kind is not dict and "." not in key else rng.randrange(2)
    if form == 2 and not value.startswith("-"):
        return ["--" + key.replace("_", "-"), value]
    return [("+" if form == 0 else "") + f"{key}={value}"]


# --------------------------------------------------------------------------- stoppers per command


def _tasks(workdir: Path) -> Path:
    tasks = workdir / "tasks.jsonl"
    tasks.write_text(GOOD + "\n")
    return tasks


def collect_argv(workdir: Path, field: str) -> list[str]:
    """Output is a directory: refused once settings and components are checked, before any server."""
    argv = ["collect", "+progress=false"]
    if field != "input_jsonl_fpath":
        argv.append(f"+input_jsonl_fpath={_tasks(workdir) if field != 'output_jsonl_fpath' else workdir / 'no.jsonl'}")
    if field not in ("output_jsonl_fpath",):
        argv.append(f"+output_jsonl_fpath={workdir if field != 'input_jsonl_fpath' else workdir / 'o.jsonl'}")
    return argv


def probe_argv(command: str) -> Any:
    def argv(workdir: Path, field: str) -> list[str]:
        return [command, "+progress=false", "+save_results=false"]  # no input: refused after the checks

    return argv


def train_argv(workdir: Path, field: str) -> list[str]:
    (workdir / "file").write_text("in the way")
    return ["train", "+save=fuzz", f"+results_dir={workdir / 'file' / 'results'}", "+progress=false"]


def sim_argv(workdir: Path, field: str) -> list[str]:
    return ["sim-server", "+describe=true"]


def engine_argv(workdir: Path, field: str) -> list[str]:
    """Accepted values stop at the binary named here, which is missing: nothing is built or started."""
    return ["engine", "llama-cpp", f"+server_binary={workdir / 'no-llama-server'}"]


def train_schema() -> type[Any]:
    from gymbench.train.settings import TrainSettings

    return TrainSettings


def schemas() -> list[tuple[str, type[Any], Any, set[str], tuple[int, ...]]]:
    """(command, schema, stopper, fields left out, statuses)."""
    from gymbench.collect.config import CollectConfig, ServerConfig
    from gymbench.engine.command import EngineSettings
    from gymbench.sim.command import SimServeSettings
    from gymbench.tune.config import DiagnoseConfig, TuneConfig

    shared = {f.name for f in dataclasses.fields(ServerConfig)}
    return [
        ("collect", CollectConfig, collect_argv, set(), (2,)),
        ("tune", TuneConfig, probe_argv("tune"), shared - {"input_jsonl_fpath", "results_dir"}, (2,)),
        ("diagnose", DiagnoseConfig, probe_argv("diagnose"), shared - {"input_jsonl_fpath"}, (2,)),
        # an accepted results_dir or save would start training: those are in destination_cases()
        ("train", train_schema(), train_argv, {"results_dir", "save"}, (2,)),
        ("sim-server", SimServeSettings, sim_argv, {"describe"}, (0, 2)),
        ("engine", EngineSettings, engine_argv, {"server_binary"}, (2,)),
    ]


def _case(command: str, key: str, value_argv: list[str], stopper: Any, field: str, wrong: bool,
          statuses: tuple[int, ...], extra: list[str] = ()) -> Case:  # fmt: skip
    def build(workdir: Path, env: Env) -> Prepared:
        return Prepared([*stopper(workdir, field), *extra, *value_argv], mentions=[key] if wrong else [])

    shown = " ".join([*extra[:1], *value_argv])[:80]
    return Case("settings", f"{command}:{shown}".replace("\x00", "<NUL>"), build, statuses=statuses)


def command_setting_cases(rng: random.Random) -> Iterator[Case]:
    for command, schema, stopper, skipped, statuses in schemas():
        for field in dataclasses.fields(schema):
            kind = kind_of(schema, field)
            if field.name in skipped or kind is None:
                continue
            for value in fuzzed_values(rng, kind):
                wrong = value in WRONG_TYPE.get(kind, set())
                yield _case(command, field.name, spelled(rng, field.name, value, kind), stopper, field.name, wrong,
                            statuses)  # fmt: skip


def component_option_cases(rng: random.Random) -> Iterator[Case]:
    """Each built-in backend, verifier and strategy option, through ``collect``'s ``*_options``."""
    from gymbench.plugins import Plugins

    plugins = Plugins()
    for kind in ("backend", "verifier", "strategy"):
        for name in sorted(plugins.components[kind]):
            schema = plugins.schema(kind, name)
            chooser = [f"+{kind}={name}"] + (
                ["+base_url=http://127.0.0.1:9/v1", "+model=m"] if kind == "backend" else []
            )
            yield _case("collect", "nope", [f"+{kind}_options.nope=1"], collect_argv, kind, True,
                        (2,), chooser)  # fmt: skip
            for field in dataclasses.fields(schema) if schema else ():
                field_kind = kind_of(schema, field)
                if field_kind is None:
                    continue
                key = f"{kind}_options.{field.name}"
                for value in fuzzed_values(rng, field_kind)[:2]:
                    wrong = value in WRONG_TYPE.get(field_kind, set())
                    yield _case("collect", field.name, [f"+{key}={value}"], collect_argv, kind, wrong, (2,), chooser)


REGRESSIONS: list[tuple[str, list[str], str]] = [
    # values that once crashed or were accepted silently: (command, settings, the setting the error names)
    ("sim-server", ["+prompt_tokens=0"], "prompt_tokens"),
    ("sim-server", ["+port=70000"], "port"),
    ("sim-server", ["+step_base_s=nan"], "step_base_s"),
    ("collect", ["+verifier=code", "+verifier_options.timeout_s=1e400"], "timeout_s"),
    ("collect", ["+verifier=none", "+verifier_options.reward=inf"], "reward"),
    ("collect", ["+responses_create_params.temperature=.nan"], "responses_create_params.temperature"),
    ("collect", ["+responses_create_params.top_p=1e400"], "responses_create_params.top_p"),
    ("collect", ["+sim.max_num_seqs=x"], "max_num_seqs"),
    ("collect", ["+sim.preset=x"], "preset"),
    ("collect", ["+sim.port=80"], "port"),
    ("collect", ["+sim_preset=nope"], "nope"),
    ("collect", ["+limit=" + HUGE], "limit"),
    ("collect", ["+extra_body=[1, 2]"], "extra_body"),
    ("collect", ["+model=a\x00b"], "model"),
    ("tune", ["+plateau_gain=-1"], "plateau_gain"),
    ("tune", ["+degrade=2"], "degrade"),
    ("tune", ["+error_rate=-1"], "error_rate"),
    ("train", ["+checkpoint_ratio=2"], "checkpoint_ratio"),
    ("train", ["+checkpointing=sometimes"], "checkpointing"),
    ("train", ["+seed=100000000000000000000"], "seed"),
    ("train", ["+threads=100000000000"], "threads"),
    ("train", ["+batch=100000000000000000000"], "batch"),
]


def regression_cases() -> Iterator[Case]:
    stoppers = {command: (stopper, statuses) for command, _, stopper, _, statuses in schemas()}
    for command, words, named in REGRESSIONS:
        stopper, _ = stoppers[command]
        yield _case(command, named, words, stopper, "", True, (2,))


def setting_cases(seed: int = 11) -> list[Case]:
    rng = random.Random(seed)
    cases = [*command_setting_cases(rng), *component_option_cases(rng), *regression_cases()]
    return list({case.id: case for case in cases}.values())  # a value sampled twice is one case
