"""``gymbench train``: benchmark training steps, or find the largest batch that fits.

torch is imported only when the command runs, never when the CLI starts.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from gymbench.errors import GymbenchError
from gymbench.measure import Recorder
from gymbench.trainstep.config import TrainConfig
from gymbench.trainstep.settings import TrainSettings

HELP = "benchmark training steps (precision, checkpointing, accumulation, memory, FLOPs) or find the largest batch"
FP16_CPU_LIMITS = {"batch": 4, "seq_len": 32}


def configure(parser: argparse.ArgumentParser) -> None:
    from gymbench.settings import add_settings_arguments

    parser.epilog = "example: gymbench train --model transformer --size tiny --batch 16 --precision bf16"
    add_settings_arguments(parser, TrainSettings)


def run(args: argparse.Namespace, plugins: Any) -> int:
    from gymbench.settings import settings_from_args

    return run_train(settings_from_args(TrainSettings, args), plugins)


def run_train(args: TrainSettings, plugins: Any) -> int:
    from gymbench.run import Run

    factory = model_factory(plugins, args.model)
    config = _shrink_fp16_on_cpu(args, build_config(args))
    if args.profile:
        from gymbench.jsonio import check_writable_file

        check_writable_file(args.profile, "profile trace", "+profile")
    run = Run(plugins, "train", args.save or "train", config.to_dict(), results_dir=args.results_dir,
              save=args.save is not None).start()  # fmt: skip
    recorder = Recorder()
    if args.find_batch:
        from gymbench.trainstep.summary import find_batch

        find_batch(factory, config, args, recorder)
    else:
        from gymbench.trainstep.summary import benchmark

        benchmark(factory, config, args, recorder)
    params = {key: config.to_dict()[key] for key in ("model", "precision", "checkpointing", "accumulation", "batch")}
    name = f"train.{args.find_batch}" if args.find_batch else "train"
    run.finish([recorder.result(name, params={**params, "size": args.size})])
    if run.saved_path is not None:
        print(f"results saved to {run.saved_path}")
    return 0


def model_factory(plugins: Any, name: str) -> Any:
    registered = plugins.components.get("model", {})
    if name not in registered:
        known = ", ".join(sorted(registered)) or "(none registered)"
        raise GymbenchError(f"unknown model {name!r}; known models: {known}. `gymbench plugins` lists them.")
    return registered[name].item.factory


def build_config(args: TrainSettings) -> TrainConfig:
    checkpointing = args.checkpointing
    if args.checkpoint_ratio is not None:
        from gymbench.trainstep.checkpointing import mode_from_ratio

        checkpointing = mode_from_ratio(args.checkpoint_ratio)
    return TrainConfig(
        model=args.model,
        model_config={"size": args.size, **args.model_options},
        batch=args.batch,
        seq_len=args.seq_len,
        precision=args.precision,
        checkpointing=checkpointing,
        accumulation=args.accumulation,
        steps=args.steps,
        warmup=args.warmup,
        device=args.device,
        lr=args.lr,
        base_batch=args.base_batch,
        seed=args.seed,
        threads=args.threads,
    )


def _shrink_fp16_on_cpu(args: TrainSettings, config: TrainConfig) -> TrainConfig:
    """fp16 has no native CPU kernels: warn, and unless told otherwise keep the shapes tiny."""
    from gymbench.trainstep.session import resolve_device

    if config.precision != "fp16" or resolve_device(config.device).type != "cpu":
        return config
    print(
        "gymbench: warning: fp16 on a CPU without native fp16 kernels runs ~150x slower than fp32",
        file=sys.stderr,
    )
    if args.allow_slow_fp16:
        return config
    from dataclasses import replace

    args.size = "tiny"
    shrunk = {key: min(getattr(config, key), limit) for key, limit in FP16_CPU_LIMITS.items()}
    shrunk["batch"] = config.accumulation * max(1, shrunk["batch"] // config.accumulation)
    print(
        f"gymbench: keeping fp16 shapes tiny: size=tiny, batch={shrunk['batch']}, "
        f"seq_len={shrunk['seq_len']} (--allow-slow-fp16 keeps yours)",
        file=sys.stderr,
    )
    return replace(config, model_config={**config.model_config, "size": "tiny"}, **shrunk)
