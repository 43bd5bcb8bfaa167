"""An example NeMo-Gym-style environment: arithmetic word problems and a numeric verifier."""
