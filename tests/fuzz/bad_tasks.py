"""Bad task files for ``gymbench collect`` (and the few odd-but-valid ones it must accept).

Each generator yields ``(name, content, bad_line)``: the file's bytes and the line the error must
name (``0``: the error is about the whole file, ``None``: the file is valid and must be collected).
A bad line is put first (refused before any server starts) and, for a seeded share of them, after
two good rows (the run has started: the good rows' rollouts must be written, the bad line named).
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .cases import Case, Env, Prepared

GOOD = '{"responses_create_params": {"input": "What is 1 + 1?"}, "expected_answer": "2"}'
MESSAGES = '{"responses_create_params": {"input": [{"role": "user", "content": "Hi"}], "temperature": 0.5}, "id": 7}'
SERVER = ["+backend=openai", "+model=gymbench-sim", "+save_results=false", "+stop_after_failures=3", "+max_retries=0"]
LATER_SHARE = 0.15
Content = tuple[str, bytes, int | None]


def row(value: str, where: str = "extra") -> bytes:
    """A good row with ``value`` (JSON text) as an extra field, or as the input."""
    if where == "input":
        return ('{"responses_create_params": {"input": ' + value + '}, "expected_answer": "2"}').encode()
    return (
        '{"responses_create_params": {"input": "What is 1 + 1?"}, "expected_answer": "2", "x": ' + value + "}"
    ).encode()


def truncated(rng: random.Random) -> Iterator[Content]:
    """Any strict prefix of a JSON object is malformed (a crash cut the line)."""
    for i in range(24):
        text = (GOOD, MESSAGES)[i % 2]
        yield f"truncated-{i}", text[: rng.randrange(1, len(text) - 1)].encode() + b"\n", 1
    for i, tail in enumerate(["x", "}", ",", "{}", "]", "garbage", "\x00", " 1"]):
        yield f"extra-data-{i}", (GOOD + tail).encode() + b"\n", 1


def not_utf8() -> Iterator[Content]:
    sequences = [
        b"\xff",
        b"\xc3\x28",
        b"\xc0\xaf",
        b"\x80",
        b"\xe2\x82",
        b"\xed\xa0\x80",
        b"\xf5\x80\x80\x80",
        b"\xfe\xfe",
    ]
    for i, bad in enumerate(sequences):
        yield f"bad-byte-{i}-in-value", row('"a' + "\0" + 'b"').replace(b"\0", bad) + b"\n", 1
        yield f"bad-byte-{i}-in-key", b'{"k' + bad + b'": 1, ' + GOOD[1:].encode() + b"\n", 1
        yield f"bad-byte-{i}-first", bad + GOOD.encode() + b"\n", 1
    text = GOOD + "\n"
    yield "utf-16-le-with-bom", b"\xff\xfe" + text.encode("utf-16-le"), 1
    yield "utf-16-be", text.encode("utf-16-be"), 1
    yield "utf-32", text.encode("utf-32"), 1
    yield "latin-1", GOOD.replace("What", "Qu\u00e9").encode("latin-1") + b"\n", 1
    yield "cp1252-quotes", GOOD.replace('"What', '"\u201cWhat').encode("cp1252") + b"\n", 1


def not_json_values() -> Iterator[Content]:
    for name in ("NaN", "Infinity", "-Infinity"):
        yield f"{name}-value", row(name) + b"\n", 1
        yield f"{name}-input", row(name, "input") + b"\n", 1
        yield f"{name}-in-list", row(f"[1, {name}]") + b"\n", 1
    yield "int-5000-digits", row("9" * 5000) + b"\n", 1
    yield "negative-int-5000-digits", row("-" + "7" * 5000) + b"\n", 1
    yield "int-4301-digits", row("1" * 4301) + b"\n", 1
    yield "float-beyond-double", row("1e400") + b"\n", 1
    yield "negative-float-beyond-double", row("-2.5e999") + b"\n", 1
    yield "single-quotes", GOOD.replace('"', "'").encode() + b"\n", 1
    yield "trailing-comma", (GOOD[:-1] + ",}").encode() + b"\n", 1
    yield "comment", (GOOD + " // a task").encode() + b"\n", 1
    yield "python-literals", row("None") + b"\n", 1
    yield "unescaped-control", row('"a\tb\x01c"') + b"\n", 1
    yield "raw-nul", row('"a\x00b"') + b"\n", 1
    yield "bad-escape", row('"\\x41"') + b"\n", 1
    yield "short-unicode-escape", row('"\\u12"') + b"\n", 1
    yield "bom-twice", b"\xef\xbb\xbf\xef\xbb\xbf" + GOOD.encode() + b"\n", 1
    yield "cr-only-line-ends", (GOOD + "\r" + GOOD + "\r").encode(), 1
    yield "two-objects-on-a-line", (GOOD + " " + GOOD).encode() + b"\n", 1


def deep(rng: random.Random) -> Iterator[Content]:
    for depth in (1_100, 10_000, 100_000):
        yield f"arrays-{depth}-deep", row("[" * depth + "]" * depth) + b"\n", 1
        yield f"objects-{depth}-deep", row('{"a":' * depth + "1" + "}" * depth) + b"\n", 1
        yield f"input-{depth}-deep", row("[" * depth + '"x"' + "]" * depth, "input") + b"\n", 1
        yield f"unclosed-{depth}-deep", b"[" * depth + b"\n", 1
    mixed = "".join(rng.choice(['{"a":', "["]) for _ in range(10_000))
    closing = "".join("}" if opener == "{" else "]" for opener in reversed([c for c in mixed if c in "{["]))
    yield "mixed-10000-deep", row(mixed + "1" + closing) + b"\n", 1


def wrong_shapes() -> Iterator[Content]:
    for i, value in enumerate(["[]", "[1, 2]", '"text"', "5", "null", "true", "{}", "[" + GOOD + "]"]):
        yield f"row-is-{i}", value.encode() + b"\n", 1
    for i, params in enumerate(["[]", '"What?"', "5", "null", "true", '[{"input": "x"}]']):
        yield f"params-is-{i}", ('{"responses_create_params": ' + params + "}").encode() + b"\n", 1
    yield "params-missing", b'{"input": "What is 1 + 1?"}\n', 1
    for i, data in enumerate(["{}", "5", "null", '""', "[]", "true", "1.5", '{"role": "user"}']):
        yield f"input-is-{i}", row(data, "input") + b"\n", 1
    for i, messages in enumerate(["[1, 2]", "[null]", '["hi", 3]', "[[]]", "[true]"]):
        yield f"messages-are-{i}", row(messages, "input") + b"\n", 1


def blank_and_binary(rng: random.Random) -> Iterator[Content]:
    for i, blank in enumerate(
        [b"", b"\n", b"\n\n\n", b"   \t \n", b"\r\n\r\n", b"\xef\xbb\xbf", b"\xef\xbb\xbf\n  \n", b"\x0c\n\x0b"]
    ):
        yield f"blank-{i}", blank, 0
    for i, odd in enumerate([b"\x00", b"\xc2\xa0\n", b"\x1a", b"\x00" * 64 + b"\n"]):
        yield f"invisible-{i}", odd, 1
    for i in range(16):
        size = rng.choice([1, 7, 100, 4096, 65536])
        garbage = bytes(rng.randrange(256) for _ in range(size))
        if not garbage.strip() or garbage.lstrip().startswith(b"{"):
            garbage = b"#" + garbage
        line = 1 + garbage.split(b"\n").index(next(part for part in garbage.split(b"\n") if part.strip()))
        yield f"binary-{i}-{size}-bytes", garbage, line
    yield "huge-garbage-line", b"x" * 3_000_000, 1
    yield "huge-unterminated-string", b'{"responses_create_params": {"input": "' + b"y" * 3_000_000, 1


def odd_but_valid() -> Iterator[Content]:
    """Inputs real datasets carry: each must be collected, with its values kept exactly."""
    yield "bom", b"\xef\xbb\xbf" + GOOD.encode() + b"\n", None
    yield "crlf", (GOOD + "\r\n" + MESSAGES + "\r\n").encode(), None
    yield "no-final-newline", (GOOD + "\n" + MESSAGES).encode(), None
    yield "blank-lines-between", ("\n\n" + GOOD + "\n  \n\n" + MESSAGES + "\n\n").encode(), None
    yield "id-20-digits", row("123456789012345678901") + b"\n", None
    yield "id-4300-digits", row("8" * 4300) + b"\n", None
    yield "lone-surrogates", row('["\\ud800", "\\udfff", "\\udc00\\ud800"]') + b"\n", None
    yield "surrogate-key", b'{"\\ud800": 1, ' + GOOD[1:].encode() + b"\n", None
    yield "escaped-nul", row('"a\\u0000b"') + b"\n", None
    yield "duplicate-keys", row('{"a": 1, "a": 2}') + b"\n", None
    yield "tiny-float", row("1e-400") + b"\n", None
    yield "unicode", row('"\u202e\U0001f600 \u0000"'.replace("\u0000", "\\u0000")).replace(b"\\\\", b"\\") + b"\n", None
    yield "deep-but-readable", row("[" * 200 + "]" * 200) + b"\n", None
    yield "big-input", row('"' + "z" * 1_000_000 + '"', "input") + b"\n", None


def all_contents(rng: random.Random) -> Iterator[Content]:
    yield from truncated(rng)
    yield from not_utf8()
    yield from not_json_values()
    yield from deep(rng)
    yield from wrong_shapes()
    yield from blank_and_binary(rng)
    yield from odd_but_valid()


def _first(name: str, content: bytes, line: int) -> Case:
    def build(workdir: Path, env: Env) -> Prepared:
        tasks = workdir / "tasks.jsonl"
        tasks.write_bytes(content)
        where = f"{tasks}:{line}" if line else str(tasks)
        return Prepared(["collect", f"+input_jsonl_fpath={tasks}", f"+output_jsonl_fpath={workdir / 'o.jsonl'}",
                         "+progress=false", "+save_results=false"], mentions=[where])  # fmt: skip

    return Case("tasks", name, build)


def _later(name: str, content: bytes, line: int) -> Case:
    """Two good rows first: the run starts, writes their rollouts, then meets the bad line."""

    def build(workdir: Path, env: Env) -> Prepared:
        tasks, out = workdir / "tasks.jsonl", workdir / "o.jsonl"
        tasks.write_bytes((GOOD + "\n" + MESSAGES + "\n").encode() + content)
        argv = ["collect", f"+input_jsonl_fpath={tasks}", f"+output_jsonl_fpath={out}", "+progress=false",
                f"+base_url={env.base_url}", *SERVER]  # fmt: skip

        def check(status: int | None, out_text: str, err: str) -> str | None:
            written = out.read_bytes().count(b"\n") if out.exists() else 0
            return None if written == 2 else f"{written} rows written before the bad line, expected 2"

        return Prepared(argv, mentions=[f"{tasks}:{line + 2}"], outputs=[out], check=check)

    return Case("tasks", f"{name}-after-good-rows", build)


def _valid(name: str, content: bytes) -> Case:
    """Collected in full, every row's values kept exactly (compared with the standard library's reading)."""

    def build(workdir: Path, env: Env) -> Prepared:
        tasks, out = workdir / "tasks.jsonl", workdir / "o.jsonl"
        tasks.write_bytes(content)
        argv = ["collect", f"+input_jsonl_fpath={tasks}", f"+output_jsonl_fpath={out}", "+progress=false",
                f"+base_url={env.base_url}", *SERVER]  # fmt: skip

        def check(status: int | None, out_text: str, err: str) -> str | None:
            expected = [json.loads(line) for line in content.decode("utf-8-sig").splitlines() if line.strip()]
            got = sorted((json.loads(line) for line in out.read_text().splitlines()), key=lambda r: r["task_index"])
            if len(got) != len(expected):
                return f"{len(got)} rows for {len(expected)} tasks"
            for row_in, row_out in zip(expected, got, strict=True):
                if any(row_out.get(key) != value for key, value in row_in.items() if key != "responses_create_params"):
                    return f"task {row_out['task_index']}: a value changed on the way through"
            return None

        return Prepared(argv, outputs=[out], check=check)

    return Case("tasks", f"valid-{name}", build, statuses=(0,))


def _special(name: str, make: Any, mention: str | None, statuses: tuple[int, ...] = (2,), server: bool = False) -> Case:
    def build(workdir: Path, env: Env) -> Prepared:
        path, feed = make(workdir)
        argv = ["collect", f"+input_jsonl_fpath={path}", f"+output_jsonl_fpath={workdir / 'o.jsonl'}",
                "+progress=false", "+save_results=false"]  # fmt: skip
        if server:
            argv += [f"+base_url={env.base_url}", *SERVER]
        return Prepared(argv, mentions=[mention.format(path=path)] if mention else [], feed=feed)

    return Case("tasks", name, build, statuses=statuses)


def _fifo(content: bytes) -> Any:
    def make(workdir: Path) -> tuple[Path, Any]:
        fifo = workdir / "tasks.fifo"
        os.mkfifo(fifo)

        def feed() -> None:
            with open(fifo, "wb") as handle:
                handle.write(content)

        return fifo, feed

    return make


def file_system_cases() -> Iterator[Case]:
    def at(relative: str, setup: Any = None) -> Any:
        def make(workdir: Path) -> tuple[Path, None]:
            if setup is not None:
                setup(workdir)
            return workdir / relative, None

        return make

    yield _special("missing-file", at("nope.jsonl"), "{path}")
    yield _special("directory", at("d", lambda w: (w / "d").mkdir()), "{path}")
    yield _special("under-a-file", at("f/tasks.jsonl", lambda w: (w / "f").write_text("x")), "{path}")
    yield _special("dangling-symlink", at("l.jsonl", lambda w: (w / "l.jsonl").symlink_to(w / "gone")), "{path}")

    def loop(workdir: Path) -> None:
        (workdir / "a.jsonl").symlink_to(workdir / "b.jsonl")
        (workdir / "b.jsonl").symlink_to(workdir / "a.jsonl")

    yield _special("symlink-loop", at("a.jsonl", loop), "{path}")
    yield _special("name-too-long", at("n" * 5000), None)
    yield _special("nul-in-name", at("a\x00b.jsonl"), None)
    yield _special("dev-null", lambda w: (Path("/dev/null"), None), "/dev/null")
    yield _special("fifo-garbage", _fifo(b"\x00garbage\n"), "{path}:1")
    yield _special("fifo-empty", _fifo(b""), "{path}")
    yield _special("fifo-bad-later", _fifo((GOOD + "\n").encode() * 2 + b"[\n"), "{path}:3", server=True)
    yield _special("fifo-valid", _fifo((GOOD + "\n" + MESSAGES + "\n").encode()), None, statuses=(0,), server=True)


def task_file_cases(seed: int = 11) -> list[Case]:
    rng = random.Random(seed)
    cases: list[Case] = []
    for name, content, line in all_contents(rng):
        if line is None:
            cases.append(_valid(name, content))
            continue
        cases.append(_first(name, content, line))
        if line and rng.random() < LATER_SHARE and content.endswith(b"\n") and content.count(b"\n") == 1:
            cases.append(_later(name, content, line))
    return cases + list(file_system_cases())
