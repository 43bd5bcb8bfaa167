"""Bad ``--config`` files, malformed command lines, and destinations that cannot be written.

Config files and command lines use ``collect``'s stopper (an output path that is a directory), so
an accepted file never starts a run. Destinations are checked with real runs where a missing check
would let a run start: the default simulator for ``collect`` (then stderr says "no server set"),
the shared one with tiny probes for ``tune``, a one-step tiny model for ``train``.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path

from .bad_settings import collect_argv
from .bad_tasks import GOOD, SERVER
from .cases import Case, Env, Prepared

CONFIG_FILES: list[tuple[str, bytes, str | None]] = [
    # (name, content, what the error must name besides the file: None = accepted)
    ("unclosed-list", b"limit: [1, 2\n", ""),
    ("nested-colon", b"limit: a: b\n", ""),
    ("lone-brace", b"{\n", ""),
    ("tab-indent", b"limit:\n\t- 1\n", ""),
    ("unterminated-quote", b"model: 'abc\n", ""),
    ("list-then-map", b"- a\nb: c\n", ""),
    ("a-list", b"[1, 2]\n", ""),
    ("a-number", b"5\n", ""),
    ("a-string", b'"text"\n', ""),
    ("block-list", b"- a\n- b\n", ""),
    ("a-bool", b"true\n", ""),
    ("null", b"null\n", None),
    ("empty", b"", None),
    ("whitespace", b"  \n\n\t\n", ""),
    ("deep-flow-lists", b"limit: " + b"[" * 10_000 + b"]" * 10_000 + b"\n", ""),
    ("deep-flow-maps", b"extra_body: " + b"{a: " * 3_000 + b"1" + b"}" * 3_000 + b"\n", ""),
    ("deep-block-maps", b"".join(b"  " * i + b"a:\n" for i in range(2_000)) + b"  " * 2_000 + b"1\n", ""),
    ("not-utf8", b"model: \xff\xfe\n", ""),
    ("utf-16", "model: m\n".encode("utf-16"), ""),
    ("nul-byte", b"model: a\x00b\n", ""),
    ("binary", bytes(range(256)) * 4, ""),
    ("unknown-key", b"nonexistent: 1\n", "nonexistent"),
    ("unknown-nested-key", b"input_jsonl_fpath:\n  sub: 1\n", "input_jsonl_fpath"),
    ("list-for-int", b"limit: [1]\n", "limit"),
    ("text-for-int", b"limit: x\n", "limit"),
    ("nan-timeout", b"request_timeout_s: .nan\n", "request_timeout_s"),
    ("inf-timeout", b"request_timeout_s: .inf\n", "request_timeout_s"),
    ("json-nan", b'{"limit": NaN}\n', "limit"),
    ("huge-repeats", b"num_repeats: 1e23\n", "num_repeats"),
    ("5000-digit-limit", b"limit: " + b"9" * 5000 + b"\n", "limit"),
    ("interpolation-for-int", b"limit: ${x}\n", "limit"),
    ("interpolation-literal", b"model: ${oc.env:HOME}\nresponses_create_params: {instructions: '${x}'}\n", None),
    ("python-tag", b"model: !!python/object/apply:os.system ['echo hi']\n", ""),
    ("binary-tag", b"model: !!binary 'not base64!'\n", ""),
    ("unhashable-key", b"? [a]\n: 1\n", ""),
    ("int-key", b"1: 2\n", "1"),
    ("null-key", b"null: 3\n", "None"),
    ("dict-for-str", b"model: {a: 1}\n", "model"),
    ("str-for-dict", b"extra_body: text\n", "extra_body"),
    ("nan-in-params", b"responses_create_params: {temperature: .nan}\n", "responses_create_params.temperature"),
    ("deep-sim", b"sim: {max_num_seqs: {a: 1}}\n", "~max_num_seqs"),
    ("anchors", b"a: &a [x, x, x, x]\nb: &b [*a, *a, *a, *a]\nextra_body: {c: [*b, *b, *b]}\n", "a"),
    ("duplicate-keys", b"limit: 1\nlimit: 2\n", None),
    ("huge", b"".join(b"k%d: 1\n" % i for i in range(5_000)), "k0"),
]  # fmt: skip


def config_file_cases() -> Iterator[Case]:
    for name, content, names in CONFIG_FILES:

        def build(workdir: Path, env: Env, content: bytes = content, names: str | None = names) -> Prepared:
            settings = workdir / "settings.yaml"
            settings.write_bytes(content)
            mentions = [str(settings)] + ([names] if names else []) if names is not None else []
            if names and names.startswith("~"):  # checked after the file is merged: only the setting is known
                mentions = [names[1:]]
            return Prepared([*collect_argv(workdir, ""), "--config", str(settings)], mentions=mentions)

        yield Case("config-file", name, build)
    for name, make in [
        ("missing", lambda w: w / "nope.yaml"),
        ("directory", lambda w: w),
        ("dev-null", lambda w: Path("/dev/null")),
        ("under-a-file", lambda w: (w / "f").write_text("x") and w / "f" / "s.yaml"),
        ("nul-in-name", lambda w: w / "a\x00b.yaml"),
        ("name-too-long", lambda w: w / ("n" * 5000)),
    ]:

        def build(workdir: Path, env: Env, make: object = make) -> Prepared:
            path = make(workdir)  # type: ignore[operator]
            shown = [] if "\x00" in str(path) or len(str(path)) > 4000 or str(path) == "/dev/null" else [str(path)]
            return Prepared([*collect_argv(workdir, ""), "--config", str(path)], mentions=shown)

        yield Case("config-file", name, build)


def _fifo_config(workdir: Path, env: Env) -> Prepared:
    fifo = workdir / "settings.fifo"
    os.mkfifo(fifo)

    def feed() -> None:
        with open(fifo, "wb") as handle:
            handle.write(b"limit: [\n")

    return Prepared([*collect_argv(workdir, ""), "--config", str(fifo)], mentions=[str(fifo)], feed=feed)


COMMAND_LINES: list[tuple[str, list[str], tuple[int, ...]]] = [
    ("flag-before-command", ["--limit", "3", "collect"], (2,)),
    ("setting-without-value", ["collect", "+limit"], (2,)),
    ("double-plus", ["collect", "++limit=x"], (2,)),
    ("empty-key", ["collect", "+=3"], (2,)),
    ("digit-key", ["collect", "+1abc=3"], (2,)),
    ("dotted-gap", ["collect", "+a..b=1"], (2,)),
    ("leading-dot", ["collect", "+.a=1"], (2,)),
    ("two-equals", ["collect", "+limit==3"], (2,)),
    ("value-with-equals", ["collect", "+limit=3=4"], (2,)),
    ("config-without-file", ["collect", "--config"], (2,)),
    ("flag-without-value", ["collect", "--limit"], (2,)),
    ("bool-flag-with-equals", ["collect", "--no-progress=false"], (2,)),
    ("bad-bool-flag", ["collect", "--progress", "maybe"], (2,)),
    ("unknown-flag", ["collect", "-x"], (2,)),
    ("unknown-top-flag", ["-x"], (2,)),
    ("unknown-command", ["colect"], (2,)),
    ("no-command", [], (2,)),
    ("fullwidth-digit", ["collect", "+limit=\uff13"], (2,)),
    ("unicode-key", ["collect", "+l\u0131mit=3"], (2,)),
    ("flag-and-setting", ["collect", "--limit", "3", "+limit=x"], (2,)),
    ("setting-and-flag", ["collect", "+limit=x", "--limit", "3"], (2,)),
    ("separator", ["collect", "--", "+limit=x"], (2,)),
    ("help", ["collect", "--help"], (0,)),
    ("version", ["--version"], (0,)),
    ("many-settings", ["collect", *(f"+limit={i}" for i in range(1000))], (2,)),
    ("show-no-path", ["show"], (2,)),
    ("compare-no-baseline", ["compare"], (2,)),
    ("compare-bad-float", ["compare", "a.json", "b.json", "--min-effect", "x"], (2,)),
]


def command_line_cases() -> Iterator[Case]:
    for name, words, statuses in COMMAND_LINES:

        def build(workdir: Path, env: Env, words: list[str] = words) -> Prepared:
            stopper = collect_argv(workdir, "")[1:] if words[:1] == ["collect"] else []
            return Prepared([*words, *stopper])

        yield Case("command-line", name, build, statuses=statuses)


# --------------------------------------------------------------------------- destinations

TINY_TUNE = ["+sample_size=2", "+min_batches=2", "+max_batches=2", "+start=1", "+max_parallelism=2", "+progress=false"]
TINY_DIAGNOSE = ["+sample_size=2", "+min_batches=2", "+max_batches=2", "+low=1", "+high=2", "+progress=false"]
TINY_TRAIN = ["--size", "tiny", "--steps", "1", "--warmup", "0", "--no-progress", "--no-memory", "--no-flops"]


def _destination(command: str, name: str, setting: str, target: object, extra: tuple[str, ...] = ()) -> Case:
    def build(workdir: Path, env: Env) -> Prepared:
        (workdir / "file").write_text("in the way")
        (workdir / "dir").mkdir()
        tasks = workdir / "tasks.jsonl"
        tasks.write_text((GOOD + "\n") * 3)
        path = target(workdir)  # type: ignore[operator]
        if command == "collect":
            argv = ["collect", f"+input_jsonl_fpath={tasks}", f"+output_jsonl_fpath={workdir / 'o.jsonl'}",
                    "+progress=false", f"+results_dir={workdir / 'results'}"]  # fmt: skip
        elif command in ("tune", "diagnose"):
            tiny = TINY_TUNE + [f"+plot={workdir / 'tune.png'}"] if command == "tune" else TINY_DIAGNOSE
            argv = [command, f"+input_jsonl_fpath={tasks}", f"+base_url={env.base_url}", *SERVER[:2], *tiny]
        else:
            argv = ["train", *TINY_TRAIN]
        shown = str(path) if len(str(path)) < 4000 else path.name[:100]  # type: ignore[union-attr]
        return Prepared([*argv, *extra, f"+{setting}={path}"], mentions=[shown])

    return Case("destinations", f"{command}:{name}", build)


def destination_cases() -> Iterator[Case]:
    under_file = lambda w: w / "file" / "x"  # noqa: E731
    a_dir = lambda w: w / "dir"  # noqa: E731
    too_long = lambda w: w / ("n" * 300)  # noqa: E731
    yield _destination(
        "collect", "output-is-fifo", "output_jsonl_fpath", lambda w: (os.mkfifo(w / "f.fifo"), w / "f.fifo")[1]
    )
    yield _destination("collect", "output-name-too-long", "output_jsonl_fpath", too_long)
    yield _destination("collect", "results-dir-is-a-file", "results_dir", lambda w: w / "file")
    yield _destination("collect", "cache-under-a-file", "verify_cache_path", under_file)
    yield _destination("collect", "cache-is-a-dir", "verify_cache_path", a_dir)
    yield _destination("collect", "cache-is-garbage", "verify_cache_path", lambda w: w / "file")
    yield _destination("collect", "metrics-name-too-long", "output_jsonl_fpath", lambda w: w / ("n" * 250))
    yield _destination("tune", "plot-under-a-file", "plot", under_file)
    yield _destination("tune", "plot-is-a-dir", "plot", a_dir)
    yield _destination("tune", "plot-name-too-long", "plot", too_long)
    yield _destination("tune", "results-dir-under-a-file", "results_dir", under_file)
    yield _destination("diagnose", "results-dir-under-a-file", "results_dir", under_file)
    yield _destination("train", "results-dir-under-a-file", "results_dir", under_file, ("+save=x",))
    yield _destination("train", "profile-under-a-file", "profile", under_file)
    yield _destination("train", "profile-is-a-dir", "profile", a_dir)


def command_line_and_file_cases(seed: int = 11) -> list[Case]:
    cases = [*config_file_cases(), Case("config-file", "fifo", _fifo_config), *command_line_cases()]
    random.Random(seed).shuffle(cases)
    return cases + list(destination_cases())
