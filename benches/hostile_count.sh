#!/usr/bin/env bash
# How many seeded hostile cases (pytest marker `hostile`, issue 24) tests/ holds: the note's figure.
# Run from the repository root after merging every helper's branch.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pytest tests -m hostile --collect-only -q -p no:cacheprovider | tail -1
