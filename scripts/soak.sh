#!/usr/bin/env bash
# scripts/soak.sh: many fault rounds (crates/cli/tests/faults.rs), each a
# push or pull whose client, server or both are killed with SIGKILL at a
# seeded random moment, then resumed, at once or once the receiver let go.
# Usage: scripts/soak.sh [ROUNDS] [FIRST_SEED]   (default 200 rounds, seed 1000)
# ROUNDS run on loopback and, as root, as many again across the emulator on
# a link that drops, corrupts, reorders and duplicates packets, a third of
# them killed during an outage of the link (HAUL_WAN_FAULT_*). The two
# halves run side by side. The log goes to bench/out/soak-*.log; a summary
# of what the rounds covered and any failing seed is printed at the end.
# A failing round names its seed; replay it alone with
#   HAUL_FAULT_ROUNDS=1 HAUL_FAULT_SEED=<seed> cargo test --release -p haul --test faults -- --nocapture
# (HAUL_WAN_FAULT_ROUNDS=1 HAUL_WAN_FAULT_SEED=<seed> for a round across the emulator)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROUNDS=${1:-200}
SEED=${2:-1000}
mkdir -p bench/out
log=bench/out/soak-$(date -u +%Y%m%d-%H%M%S).log
echo "soak: $ROUNDS fault rounds on loopback and $ROUNDS across the emulator, from seed $SEED (log: $log)" >&2
cargo test --release -p haul --test faults --no-run >/dev/null 2>&1
start=$(date +%s)
rc=0
HAUL_FAULT_ROUNDS=$ROUNDS HAUL_FAULT_SEED=$SEED \
  HAUL_WAN_FAULT_ROUNDS=$ROUNDS HAUL_WAN_FAULT_SEED=$SEED \
  cargo test --release -p haul --test faults -- --nocapture --test-threads 2 >"$log" 2>&1 || rc=$?
took=$(($(date +%s) - start))
ok=$(grep -c ': ok (' "$log" || true)
echo "== rounds passed: $ok in ${took} s, exit $rc"
for k in "push over" "pull over" "over tcp" "over udp" "Client killed" "Server killed" \
    "client then server" "server then client" "in an outage" "re-run at once" "re-run once released"; do
    printf '  %-22s %s\n' "$k" "$(grep ': ok (' "$log" | grep -c "$k" || true)"
done
grep -E "panicked|failed" "$log" | head -20 || true
exit "$rc"
