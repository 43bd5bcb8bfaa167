"""The code verifier with real confined subprocesses; limits are 1-2 s so the file stays quick."""

from __future__ import annotations

import pickle
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from gymbench.builtin.code_verifier import CodeVerifier, extract_program, read_cases
from gymbench.errors import GymbenchError
from gymbench.testing import make_plugins

ADD = "a, b = map(int, input().split())\nprint(a + b)\n"
CASES = [{"input": "1 2\n", "output": "3\n"}, {"input": "5 5", "output": "10"}]


def fenced(program: str) -> str:
    return f"Here is my solution:\n```python\n{program}```\nIt reads two numbers."


@pytest.fixture
def verifier() -> CodeVerifier:
    # A generous wall clock: a loaded machine may take seconds to start an interpreter. The CPU
    # limit, which load does not stretch, is what stops runaway programs here.
    return make_plugins().verifier("code", {"timeout_s": 60, "cpu_s": 1, "memory_mb": 256, "file_mb": 1})


def test_right_program_passes_every_case(verifier: CodeVerifier) -> None:
    verdict = verifier.verify({"tests": CASES}, fenced(ADD))
    assert (verdict.reward, verdict.failure_kind) == (1.0, None)
    assert verdict.details["program_source"] == "fence"
    assert verdict.details["confinement"]["audit_hook"] is True


def test_wrong_program_is_judged_wrong_not_a_failure(verifier: CodeVerifier) -> None:
    verdict = verifier.verify({"tests": CASES}, fenced("print(3)\n"))
    assert (verdict.reward, verdict.failure_kind) == (0.5, None)
    outcomes = [case["outcome"] for case in verdict.details["cases"]]
    assert outcomes == ["passed", "wrong_output"]
    assert verdict.details["cases"][1]["got"] == "3\n"


def test_all_or_nothing_scoring() -> None:
    strict = make_plugins().verifier("code", {"timeout_s": 60, "scoring": "all_or_nothing"})
    verdict = strict.verify({"tests": {"inputs": ["1 2", "5 5"], "outputs": ["3", "10"]}}, "print(3)")
    assert (verdict.reward, verdict.failure_kind) == (0.0, None)


def test_test_script_mode(verifier: CodeVerifier) -> None:
    script = "assert add(1, 2) == 3\nassert add(-1, 1) == 0\n"
    program = "def add(a, b):\n    return a + b\n\nif __name__ == '__main__':\n    print(add(int(input()), 1))\n"
    assert verifier.verify({"tests": script}, fenced(program)).reward == 1.0
    wrong = verifier.verify({"tests": script}, fenced("def add(a, b):\n    return a - b\n"))
    assert (wrong.reward, wrong.failure_kind, wrong.details["cases"][0]["outcome"]) == (0.0, None, "failed_assertion")
    early_exit = verifier.verify({"tests": script}, fenced("import sys\nsys.exit(0)\n"))
    assert (early_exit.reward, early_exit.failure_kind) == (0.0, "runtime_error")


@pytest.mark.parametrize(
    ("row", "response", "kind"),
    [
        ({"question": "?"}, ADD, "no_tests"),
        ({"tests": []}, ADD, "no_tests"),
        ({"tests": [{"input": "1"}]}, ADD, "invalid_tests"),
        ({"tests": {"inputs": ["1"], "outputs": []}}, ADD, "invalid_tests"),
        ({"tests": CASES}, "```cpp\nint main() {}\n```", "no_code"),
        ({"tests": CASES}, "   ", "no_code"),
        ({"tests": CASES}, "I would add the two numbers.", "syntax_error"),
        ({"tests": CASES}, fenced("raise ValueError('boom')\n"), "runtime_error"),
    ],
)
def test_malformed_tasks_and_answers_are_failures(verifier: CodeVerifier, row: dict, response: str, kind: str) -> None:
    verdict = verifier.verify(row, response)
    assert (verdict.reward, verdict.failure_kind) == (0.0, kind)


def test_infinite_loop_is_killed_and_later_cases_skipped(verifier: CodeVerifier) -> None:
    verdict = verifier.verify({"tests": CASES}, fenced("while True:\n    pass\n"))
    assert (verdict.reward, verdict.failure_kind) == (0.0, "timeout")
    first, second = verdict.details["cases"]
    assert first["outcome"] == "timeout"
    assert second == {"outcome": "skipped"}


def test_sleeping_program_is_killed_by_the_wall_clock() -> None:
    short = make_plugins().verifier("code", {"timeout_s": 1.5, "cpu_s": 1})
    verdict = short.verify({"tests": CASES[:1]}, fenced("import time\ntime.sleep(600)\n"))
    assert verdict.failure_kind == "timeout"
    assert verdict.details["confinement"]["process_group_killed"] is True


@pytest.mark.parametrize(
    "bomb", ["x = bytearray(10**10)\n", "hoard = []\nwhile True:\n    hoard.append(' ' * 10**7)\n"]
)
def test_memory_bomb_hits_the_memory_limit(verifier: CodeVerifier, bomb: str) -> None:
    verdict = verifier.verify({"tests": CASES[:1]}, fenced(bomb))
    assert (verdict.reward, verdict.failure_kind) == (0.0, "memory_limit")


def test_output_flood_hits_the_file_size_limit(verifier: CodeVerifier) -> None:
    verdict = verifier.verify({"tests": CASES[:1]}, fenced("while True:\n    print('x' * 1000)\n"))
    assert verdict.failure_kind == "output_limit"


def test_socket_is_blocked(verifier: CodeVerifier) -> None:
    program = "import socket\ns = socket.create_connection(('1.1.1.1', 80), timeout=1)\nprint('connected')\n"
    verdict = verifier.verify({"tests": CASES[:1]}, fenced(program))
    assert (verdict.reward, verdict.failure_kind) == (0.0, "network_blocked")


def test_socket_blocked_even_when_the_program_swallows_the_error(verifier: CodeVerifier) -> None:
    program = "import socket\ntry:\n    socket.socket().connect(('1.1.1.1', 80))\nexcept OSError:\n    print(0)\n"
    verdict = verifier.verify({"tests": CASES[:1]}, fenced(program))
    assert verdict.failure_kind == "network_blocked"


def test_writes_outside_the_directory_are_blocked(verifier: CodeVerifier, tmp_path: Path) -> None:
    target = tmp_path / "escaped.txt"
    attempts = [
        f"open({str(target)!r}, 'w').write('x')\n",
        f"import os\nos.close(os.open({str(target)!r}, os.O_WRONLY | os.O_CREAT))\n",
        f"import os\nos.symlink({str(target)!r}, 'link')\nopen('link', 'w').write('x')\n",
        f"import os\nos.rename({str(tmp_path)!r}, 'stolen')\n",
    ]
    for program in attempts:
        verdict = verifier.verify({"tests": CASES[:1]}, fenced(program))
        assert (verdict.reward, verdict.failure_kind) == (0.0, "write_blocked"), program
    assert not target.exists() and tmp_path.exists()


def test_writes_inside_the_directory_work(verifier: CodeVerifier) -> None:
    program = "open('scratch.txt', 'w').write(input())\nprint(open('scratch.txt').read())\n"
    assert verifier.verify({"tests": [{"input": "hi", "output": "hi"}]}, fenced(program)).reward == 1.0


@pytest.mark.parametrize("program", ["import subprocess\nsubprocess.run(['true'])\n", "import ctypes\n"])
def test_new_processes_and_ctypes_are_blocked(verifier: CodeVerifier, program: str) -> None:
    assert verifier.verify({"tests": CASES[:1]}, fenced(program)).failure_kind == "call_blocked"


def test_safe_from_threads_and_picklable(verifier: CodeVerifier) -> None:
    copy = pickle.loads(pickle.dumps(verifier))
    with ThreadPoolExecutor(2) as pool:
        rewards = list(pool.map(lambda text: copy.verify({"tests": CASES}, text).reward, [ADD, "print(3)", ADD]))
    assert rewards == [1.0, 0.5, 1.0]


def test_program_extraction() -> None:
    text = "```text\nout\n```\n```py\nprint(1)\n```\n```python\nprint(2)\n```\n```\nprint(3)\n```"
    assert extract_program(text) == ("print(2)\n", "fence")
    assert extract_program("```python\nprint(1)\n# cut by the token limit") == (
        "print(1)\n# cut by the token limit",
        "fence",
    )
    assert extract_program("print(4)") == ("print(4)", "whole_text")


def test_read_cases_accepts_three_shapes() -> None:
    assert len(read_cases("assert True")) == 1
    assert len(read_cases({"inputs": ["1"], "outputs": ["1"]})) == 1
    assert isinstance(read_cases(42), str)


@pytest.mark.parametrize(
    "config", [{"timeout_s": 0}, {"scoring": "best"}, {"compare": "fuzzy"}, {"memory_mb": 1}, {"timeout": 1}]
)
def test_bad_config_is_a_clear_error(config: dict) -> None:
    with pytest.raises(GymbenchError, match="verifier 'code'"):
        make_plugins().verifier("code", config)


def test_network_namespace_leaves_only_loopback(verifier: CodeVerifier) -> None:
    program = "print(sorted(line.split(':')[0].strip() for line in open('/proc/net/dev').readlines()[2:]))\n"
    verdict = verifier.verify({"tests": [{"input": "", "output": "['lo']"}]}, fenced(program))
    if not verdict.details["confinement"]["network"].endswith("namespace"):
        pytest.skip(f"no network namespace here: {verdict.details['confinement']['network']}")
    assert verdict.reward == 1.0, verdict.details


@pytest.mark.parametrize("config", [{"python": "/nonexistent/python"}, {"tmp_dir": "/nonexistent/dir"}])
def test_a_broken_sandbox_is_a_verifier_failure(config: dict) -> None:
    verdict = make_plugins().verifier("code", config).verify({"tests": CASES}, ADD)
    assert (verdict.reward, verdict.failure_kind) == (0.0, "sandbox_error")
    assert "could not" in verdict.details["cases"][0]["stderr"]
