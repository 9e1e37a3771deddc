#!/usr/bin/env bash
# scripts/soak.sh: many fault rounds (crates/cli/tests/faults.rs), each a
# push or pull killed with SIGKILL at a seeded random moment and resumed.
# Usage: scripts/soak.sh [ROUNDS] [FIRST_SEED]   (default 200 rounds, seed 1000)
# As root, as many rounds again run across the emulator on a link that
# drops, corrupts, reorders and duplicates packets (HAUL_WAN_FAULT_*).
# A failing round names its seed; replay it alone with
#   HAUL_FAULT_ROUNDS=1 HAUL_FAULT_SEED=<seed> cargo test --release -p cli --test faults -- --nocapture
# (HAUL_WAN_FAULT_ROUNDS=1 HAUL_WAN_FAULT_SEED=<seed> for a round across the emulator)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROUNDS=${1:-200}
SEED=${2:-1000}
echo "soak: $ROUNDS fault rounds from seed $SEED" >&2
start=$(date +%s)
log=$(mktemp)
rc=0
HAUL_FAULT_ROUNDS=$ROUNDS HAUL_FAULT_SEED=$SEED \
  HAUL_WAN_FAULT_ROUNDS=$ROUNDS HAUL_WAN_FAULT_SEED=$SEED \
  cargo test --release -p cli --test faults -- --nocapture >"$log" 2>&1 || rc=$?
grep -E "^seed|test result|panicked" "$log" || true
echo "soak: $(grep -c ': ok (' "$log") rounds passed, exit $rc, $(($(date +%s) - start)) s (log: $log)" >&2
exit "$rc"
