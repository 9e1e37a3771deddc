#!/usr/bin/env bash
# bench/third_party.sh: a transfer between two daemons orchestrated from a
# third host (issue 42) against the same copy started on the source, on
# one emulated WAN between them (1 Gbit/s, 150 ms, MTU 1500, untuned
# namespaces). Three namespaces: the client's is joined to A and to B by
# veth links of its own, so only control crosses it. Runs alternate (on A,
# then third-party), each a first contact (no path known, a fresh
# HAUL_HOME for the copy on A; the job's daemon keeps none). Goodput =
# file bytes x 8 / the wall time of the command that was typed (`haul cp`
# on A; `haul cp A:src B:dst` on the client, which measures the sources,
# gets B's grant, submits and follows the job to its end). Prints each
# run and the medians, and their ratio.
#
# Needs root and /dev/net/tun (it runs the ignored measurement in
# crates/cli/tests/managed_wan.rs). --size MiB (default 1024), --reps N
# (default 5).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
MIB=1024 REPS=5
while (($#)); do
  case $1 in
    --size) MIB=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    *) echo "usage: bench/third_party.sh [--size MIB] [--reps N]" >&2; exit 2 ;;
  esac
done
MG_MIB=$MIB MG_RUNS=$REPS cargo test -q --release -p haul --test managed_wan \
  measure_third_party_against_a_copy_started_on_a -- --ignored --nocapture 2>&1 |
  grep -E "started on A|third-party|medians|SKIPPED|panicked"
