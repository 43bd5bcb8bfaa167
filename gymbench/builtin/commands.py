"""Built-in subcommands that need nothing beyond the plugin registry and results files."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from gymbench.hookspecs import hookimpl
from gymbench.record import load_record
from gymbench.types import Command

if TYPE_CHECKING:
    from gymbench.plugins import Plugins


def _configure_plugins(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")


def _run_plugins(args: argparse.Namespace, plugins: Plugins) -> int:
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
    if args.json:
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


def _configure_show(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("path", help="a results file under results/")


def _run_show(args: argparse.Namespace, plugins: Plugins) -> int:
    record = load_record(args.path)
    machine = record.fingerprint["machine"]
    commit = record.fingerprint["commit"]
    print(f"{record.name} ({record.kind}) at {record.created_at}")
    print(f"machine {machine['key']}: {machine['cpu_model']}, {machine['gpu_note']}")
    print(f"commit {commit['id']} dirty={commit['dirty']} branch={commit['branch']}")
    for bench in record.benchmarks:
        for metric_name, metric in bench.metrics.items():
            print(
                f"  {bench.id}  {metric_name} = {metric.value:.6g} {metric.unit} "
                f"({metric.direction} is better, {len(metric.samples)} samples)"
            )
    return 0


@hookimpl
def gymbench_register_commands() -> list[Command]:
    return [
        Command(
            "plugins",
            "list every registered backend, verifier, strategy and command with its plugin",
            _configure_plugins,
            _run_plugins,
        ),
        Command("show", "print a saved results record", _configure_show, _run_show),
    ]
