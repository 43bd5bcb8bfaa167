"""Start-up CPU of ``gymbench --version``, ``gymbench --help`` and every ``gymbench COMMAND --help``.

``python benches/startup_cpu.py [--repeats 5] [--tree DIR] [--json OUT] [--before BEFORE.json]`` runs
each case in a fresh interpreter, the way the console script does (``from gymbench.cli import main``),
on the gymbench in ``DIR`` (default: this checkout; another checkout gives the "before"), and
prints the median user+system CPU seconds of the child (``getrusage(RUSAGE_CHILDREN)``, so other
processes on the machine do not count) and how many modules it imported. ``--before`` adds the
figures of an earlier ``--json`` as a column, with the ratio. Not a test: it asserts nothing about
time; ``tests/test_startup_imports.py`` checks which modules load.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]

CHILD = (
    "import contextlib, io, sys\n"
    "from gymbench.cli import main\n"
    "with contextlib.redirect_stdout(io.StringIO()):\n"
    "    try:\n"
    "        main(sys.argv[1:])\n"
    "    except SystemExit:\n"
    "        pass\n"
    "sys.stderr.write(str(len(sys.modules)))\n"
)


LIST_COMMANDS = "from gymbench.plugins import Plugins\nprint(' '.join(sorted(Plugins().commands)))"


def python(tree: Path, code: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """``python -c CODE ARGV`` importing gymbench from ``tree`` (the working directory comes first on
    ``sys.path``, so it is the tree too)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, env=env, cwd=tree)


def cases(tree: Path) -> list[list[str]]:
    commands = python(tree, LIST_COMMANDS).stdout.split()
    return [["--version"], ["--help"]] + [[name, "--help"] for name in commands]


def child_cpu(tree: Path, argv: list[str]) -> tuple[float, int]:
    """CPU seconds (user + system) of one fresh ``gymbench ARGV`` and its module count."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = python(tree, CHILD, *argv)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"gymbench {' '.join(argv)} failed:\n{done.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, int(done.stderr.strip().splitlines()[-1])


def measure(tree: Path, repeats: int) -> dict[str, dict[str, float]]:
    figures = {}
    for argv in cases(tree):
        runs = [child_cpu(tree, argv) for _ in range(repeats)]
        figures[" ".join(argv)] = {
            "cpu_s_median": statistics.median(cpu for cpu, _ in runs),
            "modules": runs[-1][1],
        }
    return figures


def table(figures: dict[str, dict[str, float]], before: dict[str, dict[str, float]] | None) -> str:
    head = "| case | CPU ms (median) | modules |"
    rule = "|---|---:|---:|"
    if before:
        head = "| case | before CPU ms | after CPU ms | after/before | before modules | after modules |"
        rule = "|---|---:|---:|---:|---:|---:|"
    lines = [head, rule]
    for case, now in figures.items():
        cpu_ms = now["cpu_s_median"] * 1e3
        if not before or case not in before:
            lines.append(f"| `gymbench {case}` | {cpu_ms:.0f} | {now['modules']:.0f} |")
            continue
        old = before[case]
        old_ms = old["cpu_s_median"] * 1e3
        lines.append(
            f"| `gymbench {case}` | {old_ms:.0f} | {cpu_ms:.0f} | {cpu_ms / old_ms:.2f} "
            f"| {old['modules']:.0f} | {now['modules']:.0f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="runs per case; the median is reported")
    parser.add_argument("--tree", type=Path, default=CHECKOUT, help="the checkout to measure (default: this one)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--before", type=Path, help="figures of an earlier --json, shown beside these")
    args = parser.parse_args()
    figures = measure(args.tree.resolve(), args.repeats)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    before = json.loads(args.before.read_text()) if args.before else None
    print(f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} CPUs, median of {args.repeats}")
    print(table(figures, before))


if __name__ == "__main__":
    main()
