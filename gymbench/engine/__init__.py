"""A real inference engine at hand: llama.cpp's ``llama-server``, built once and cached, serving a
tiny random-weights model made here (``gymbench engine llama-cpp``, the pytest fixture
``gymbench_llama_server``). A job package: nothing in the core imports it."""
