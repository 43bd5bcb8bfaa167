"""The ``gymbench`` command. Every subcommand, the built-in ones included, comes from a plugin.

Only the chosen subcommand's parser is built (its ``configure`` may import the settings schema it
needs); the others are listed by name and help alone, so ``gymbench --version`` and ``gymbench
plugins`` import nothing they do not use.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gymbench.plugins import Plugins


class VersionAction(argparse.Action):
    """argparse's ``version`` action, but the version is looked up only when ``--version`` is given
    (``importlib.metadata`` is a sizeable import that no other invocation needs)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS) -> None:
        super().__init__(
            option_strings, dest, nargs=0, default=argparse.SUPPRESS, help="show program's version number and exit"
        )

    def __call__(self, parser: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        from gymbench.fingerprint import package_version

        print(f"gymbench {package_version('gymbench')}")
        parser.exit()


def build_parser(plugins: Plugins, chosen: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gymbench",
        description="Benchmark and regression harness for RL post-training of language models.",
    )
    parser.add_argument("--version", action=VersionAction)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in sorted(plugins.commands):
        command = plugins.commands[name].item
        sub = subparsers.add_parser(name, help=command.help, description=command.help)
        if name == chosen:
            command.configure(sub)
            plugins.hook.gymbench_add_options(parser=sub, command=name)
    return parser


def chosen_command(argv: Sequence[str], plugins: Plugins) -> str | None:
    """The subcommand named on the command line: the first word that is not an option."""
    for token in argv:
        if not token.startswith("-"):
            return token if token in plugins.commands else None
    return None


def parse(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    """Options and ``+key=value`` settings in any order (``--results-dir D +input=...`` works)."""
    from gymbench.settings import split_overrides

    args, extras = parser.parse_known_args(argv)
    overrides, unknown = split_overrides(extras)
    if unknown or (overrides and not hasattr(args, "overrides")):
        parser.error(f"unrecognized arguments: {' '.join(unknown or overrides)}")
    args.extra_overrides = overrides
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """The program. Ctrl-C at any point (plugin loading, parsing, a command's imports, a simulator
    starting, the run) ends in one line and exit status 130, never a traceback: the handler is
    outside everything else, its own handlers included."""
    try:
        from gymbench.console import ctrl_c_never_swallowed
        from gymbench.start_guard import end_start_up_guard

        with ctrl_c_never_swallowed():
            end_start_up_guard()
            return _main(argv)
    except KeyboardInterrupt:
        return _interrupted()
    except Exception as exc:
        if not _caused_by_ctrl_c(exc):
            raise
        return _interrupted()


def _interrupted() -> int:
    with contextlib.suppress(KeyboardInterrupt):  # a second Ctrl-C while saying so
        print("gymbench: interrupted", file=sys.stderr)
    return 130


def _caused_by_ctrl_c(exc: BaseException) -> bool:
    """Python 3.11 wraps an exception raised while a class is being made (``__set_name__``: a
    dataclass field) in a RuntimeError; Ctrl-C landing in a command's imports then arrives as one."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False


def _main(argv: Sequence[str] | None) -> int:
    from gymbench.console import printable
    from gymbench.errors import GymbenchError
    from gymbench.plugins import Plugins
    from gymbench.secrets import install_output_filter, redact

    words = list(sys.argv[1:] if argv is None else argv)
    install_output_filter()  # every line printed from here on is redacted (gymbench.secrets)
    with contextlib.suppress(AttributeError, ValueError):  # not a text stream, or already closed
        # Data keeps lone surrogates exactly (JSON allows them); printing one must not crash.
        sys.stdout.reconfigure(errors="backslashreplace")  # type: ignore[union-attr]
    try:
        plugins = Plugins()
        parser = build_parser(plugins, chosen_command(words, plugins))
        args = parse(parser, words)
        if args.command is None:
            parser.print_help()
            print("gymbench: error: no command given; choose one of those listed above", file=sys.stderr)
            return 2
        return plugins.commands[args.command].item.run(args, plugins)
    except GymbenchError as exc:
        lines = redact(str(exc)).split("\n")  # a deliberate multi-line error keeps its lines
        print("gymbench: error: " + "\n".join(printable(line) for line in lines), file=sys.stderr)
        return int(getattr(exc, "exit_status", 2))  # a server outage is not bad input: 1
    except BrokenPipeError:
        # The reader went away (``gymbench show ... | head``): stop quietly, as other tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
