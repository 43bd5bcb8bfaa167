"""The training-step bench: models, precision, checkpointing, OOM backoff, memory, FLOPs, probes.

A room of gymbench: it imports only the core modules. Importing this package imports no torch;
the modules that need torch import it themselves.
"""
