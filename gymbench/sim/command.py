"""``gymbench sim-server``: run the simulator in the foreground, or describe it.

Its settings are the engine's (:class:`~gymbench.sim.config.SimConfig`) plus where to listen,
read the same way as every other command's: ``+key=value``, ``--key value`` or ``--config FILE``.
A preset is applied first, then a calibrated profile (``+profile=engine.yaml``, see
:mod:`gymbench.sim.profile`), and anything given explicitly wins over both.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gymbench.settings import JsonOutput, ServedReplicas, doc, with_defaults
from gymbench.sim.config import PRESET_HELP, SimConfig, slowed

if TYPE_CHECKING:
    from gymbench.plugins import Plugins


@dataclass(frozen=True)
class SimServeSettings(SimConfig, ServedReplicas, JsonOutput):
    preset: str | None = field(
        default=None, metadata=doc("start from a preset: " + "; ".join(f"{k}: {v}" for k, v in PRESET_HELP.items()))
    )
    profile: str | None = field(
        default=None,
        metadata=doc(
            "a calibrated simulator profile (YAML from gymbench calibrate-sim), laid over the preset", path=True
        ),
    )
    slow_replica_factor: float = field(
        default=1.0, metadata=doc("the last replica's steps take this many times as long (a straggler to find)")
    )
    describe: bool = field(default=False, metadata=doc("print the theoretical capacity and exit"))
    prompt_tokens: float = field(default=32, metadata=doc("assumed prompt length for --describe"))
    describe_max_tokens: int | None = field(
        default=None, metadata=doc("assumed max_tokens for --describe", was="max_tokens")
    )

    def __post_init__(self) -> None:
        from gymbench.settings import at_least, check_listen, require

        super().__post_init__()
        check_listen(self.host, self.port)
        require(self.prompt_tokens > 0, "prompt_tokens", self.prompt_tokens, "a number of tokens above 0")
        at_least("describe_max_tokens", self.describe_max_tokens, 1)
        require(0 < self.slow_replica_factor <= 1000, "slow_replica_factor", self.slow_replica_factor,
                "a step-time multiplier above 0 (1: as fast as the others)")  # fmt: skip

    def engine(self) -> SimConfig:
        return SimConfig(**{f.name: getattr(self, f.name) for f in dataclasses.fields(SimConfig)})


SimServeSettings = with_defaults(  # type: ignore[misc]
    SimServeSettings, {"json": "with --describe: machine-readable output"}, port=8000
)


def configure(parser: argparse.ArgumentParser) -> None:
    from gymbench.settings import add_settings_arguments

    add_settings_arguments(parser, SimServeSettings, title="settings (engine settings override the preset)")


def settings_from(args: argparse.Namespace) -> SimServeSettings:
    """Two passes: the first finds the preset and profile, the second lays the user's settings over them."""
    from gymbench.errors import GymbenchError
    from gymbench.settings import settings_from_args
    from gymbench.sim.config import DEFAULT_PRESET, PRESETS, load_profile

    first = settings_from_args(SimServeSettings, args)
    preset = first.preset or DEFAULT_PRESET
    if preset not in PRESETS:
        raise GymbenchError(f"unknown simulator preset {preset!r}; known presets: {', '.join(PRESETS)}")
    fitted = load_profile(first.profile) if first.profile else {}
    return settings_from_args(SimServeSettings, args, base={**PRESETS[preset], **fitted})


def run(args: argparse.Namespace, plugins: Plugins) -> int:
    settings = settings_from(args)
    config = settings.engine()
    if settings.describe:
        return _describe(config, settings)
    import asyncio

    from gymbench.sim.serve import install_fast_loop, serve

    install_fast_loop()

    configs = [config] * (settings.replicas - 1) + [slowed(config, settings.slow_replica_factor)]
    urls: dict[int, str] = {}

    def announcer(index: int) -> Callable[[int], None]:
        def announce(port: int) -> None:
            urls[index] = f"http://{settings.host}:{port}/v1"
            if len(urls) < len(configs):
                return
            if len(configs) == 1:
                print(f"gymbench simulated server listening on {urls[0]} (Ctrl-C to stop)", flush=True)
            else:
                listed = ", ".join(urls[i] for i in range(len(configs)))
                print(f"gymbench simulated replicas listening: +base_url=[{listed}] (Ctrl-C to stop)", flush=True)

        return announce

    async def main() -> None:
        stop = asyncio.Event()
        ports = [settings.port + i if settings.port else 0 for i in range(len(configs))]
        await asyncio.gather(*(serve(each, settings.host, port, announcer(index), stop)
                               for index, (each, port) in enumerate(zip(configs, ports, strict=True))))  # fmt: skip

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
    except OSError as exc:  # the address is taken, or not this machine's
        from gymbench.errors import GymbenchError

        raise GymbenchError(
            f"cannot listen on {settings.host}:{settings.port} ({exc.strerror or exc}); choose another +host or +port"
        ) from None
    return 0


def _describe(config: SimConfig, settings: SimServeSettings) -> int:
    import json

    from gymbench.sim.capacity import describe, describe_text

    capacity = describe(config, prompt_tokens=settings.prompt_tokens, max_tokens=settings.describe_max_tokens)
    if settings.json:
        data: dict[str, Any] = {"config": config.to_dict(), "capacity": dataclasses.asdict(capacity)}
        print(json.dumps(data, indent=2))
    else:
        print(describe_text(config, capacity))
    return 0
