#!/usr/bin/env bash
# How many seeded hostile cases tests/ holds, and the generated contract cases (issue 41) by class.
#   bash benches/hostile_count.sh          counts only (pytest --collect-only): the note's figures
#   bash benches/hostile_count.sh --run    also runs the full generated sweep (GYMBENCH_FUZZ_FULL=1,
#                                          ~5 min of settings/readers, ~25 min of client paths, mostly
#                                          waiting on deadlines) and prints cases, tracebacks, hangs,
#                                          files left and secrets by kind of case
# Run from the repository root after merging every helper's branch.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "hostile-marked cases: $(python -m pytest tests -m hostile --collect-only -q -p no:cacheprovider | tail -1)"
python - <<'EOF'
from collections import Counter
from tests.fuzz.generated import all_contract_cases, sample
from tests.fuzz.test_client_paths import CASES as CLIENT, sampled

cases = all_contract_cases()
kinds = Counter(case.id.split("/")[0] for case in [*cases, *CLIENT])
print("generated cases:", dict(kinds), "sampled by default:", len(sample(cases)) + len(sampled(CLIENT)))
EOF
if [[ "${1:-}" == "--run" ]]; then
    tally=$(mktemp)
    GYMBENCH_FUZZ_FULL=1 GYMBENCH_FUZZ_TALLY="$tally" python -m pytest tests/fuzz/test_contracts.py \
        tests/fuzz/test_client_paths.py -q -p no:cacheprovider -rx | tail -3 || true
    python - "$tally" <<'EOF'
import json, sys
from collections import Counter, defaultdict

by_kind: dict[str, Counter] = defaultdict(Counter)
for line in open(sys.argv[1]):
    row = json.loads(line)
    kind = row["id"].split("/")[0]
    by_kind[kind]["cases"] += 1
    for found in row["classes"]:
        by_kind[kind][found] += 1
columns = ["cases", "traceback", "hang", "files-left", "secret", "unclear"]
print("| kind | " + " | ".join(columns) + " |")
for kind, counts in by_kind.items():
    print(f"| {kind} | " + " | ".join(str(counts[c]) for c in columns) + " |")
EOF
    rm -f "$tally"
fi
