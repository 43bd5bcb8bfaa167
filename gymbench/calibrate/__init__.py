"""Measuring a real engine: the closed-loop load generator (the benches' truths and the simulator's
faithfulness checks) and ``gymbench calibrate-sim``, which fits a simulator profile to what it
measured. It sends its requests through the built-in OpenAI backend, so it sits above ``builtin``
and ``sim``, beside ``collect`` and ``tune``."""
