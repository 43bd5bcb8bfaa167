"""Built-in subcommands that need nothing beyond the plugin registry and results files."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gymbench.hookspecs import hookimpl
from gymbench.record import load_record
from gymbench.types import Command

if TYPE_CHECKING:
    from gymbench.plugins import Plugins
    from gymbench.settings import InputFile


def _configure_plugins(parser: argparse.ArgumentParser) -> None:
    from gymbench.settings import JsonOutput, add_settings_arguments

    add_settings_arguments(parser, JsonOutput, switches=True)


def _run_plugins(args: argparse.Namespace, plugins: Plugins) -> int:
    from gymbench.settings import JsonOutput, settings_from_args

    settings = settings_from_args(JsonOutput, args)
    listing = {
        kind: [
            {"name": reg.name, "plugin": reg.plugin, "description": reg.item.description}
            for reg in sorted(registered.values(), key=lambda r: r.name)
        ]
        for kind, registered in plugins.components.items()
    }
    listing["command"] = [
        {"name": reg.name, "plugin": reg.plugin, "description": reg.item.help}
        for reg in sorted(plugins.commands.values(), key=lambda r: r.name)
    ]
    listing["engine"] = [
        {"name": reg.name, "plugin": reg.plugin, "description": reg.item.description}
        for reg in sorted(plugins.engines.values(), key=lambda r: r.name)
    ]
    if settings.json:
        json.dump(listing, sys.stdout, indent=2)
        print()
        return 0
    for kind, rows in listing.items():
        print(f"{'strategies' if kind == 'strategy' else kind + 's'}:")
        if not rows:
            print("  (none registered)")
        width = max((len(row["name"]) for row in rows), default=0)
        for row in rows:
            print(f"  {row['name']:<{width}}  [{row['plugin']}]  {row['description']}")
    return 0


def _show_settings() -> type[InputFile]:
    from gymbench.settings import InputFile, with_defaults

    return with_defaults(InputFile, {"path": "a results file under results/"})


def _configure_show(parser: argparse.ArgumentParser) -> None:
    from gymbench.settings import add_settings_arguments

    add_settings_arguments(parser, _show_settings(), switches=True)


def _run_show(args: argparse.Namespace, plugins: Plugins) -> int:
    from gymbench.console import printable
    from gymbench.settings import settings_from_args
    from gymbench.units import quantity

    record = load_record(str(settings_from_args(_show_settings(), args).path))
    machine = record.fingerprint["machine"]
    lines = [f"{record.name} ({record.kind}) at {record.created_at}",
             f"machine {machine['key']}: {machine['cpu_model']}, {machine['gpu_note']}",
             _commit_line(record.fingerprint.get("commit") or {})]  # fmt: skip
    for bench in record.benchmarks:
        for metric_name, metric in bench.metrics.items():
            count = len(metric.samples)
            samples = f", {count} samples" if count > 1 else ""
            shown = quantity(metric.value, metric.unit)
            lines.append(f"  {bench.id}  {metric_name} = {shown} ({metric.direction} is better{samples})")
    print("\n".join(printable(line) for line in lines))  # every string in a record is anyone's to write
    return 0


def _commit_line(commit: Mapping[str, Any]) -> str:
    """The commit, or why there is none (not a git checkout), instead of ``commit None``."""
    if not commit.get("id"):
        return "commit: unknown (not run from a git checkout)"
    dirty = " with uncommitted changes" if commit.get("dirty") else ""
    branch = f" on {commit['branch']}" if commit.get("branch") else ""
    return f"commit {commit['id'][:12]}{branch}{dirty}"


@hookimpl
def gymbench_register_commands() -> list[Command]:
    return [
        Command(
            "plugins",
            "list every registered backend, verifier, strategy, model (gymbench train) and command with its plugin",
            _configure_plugins,
            _run_plugins,
        ),
        Command("show", "print a saved results record", _configure_show, _run_show),
    ]
