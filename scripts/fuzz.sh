#!/usr/bin/env bash
# Runs every fuzz target under cargo-fuzz (libFuzzer) for a bounded time
# or number of runs, then keeps any crash as a regression input that the
# stable test suite replays (crates/fuzzing/tests/regressions.rs).
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
#
# Needs a nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz`).
# Default: 60 s per target, every target.
#   FUZZ_SANITIZER=address (the default of cargo-fuzz) or none (faster;
#     haul has little unsafe code).
#   FUZZ_RUNS=N: stop a target after N executions (SECONDS still caps it).
#   FUZZ_SUMMARY=FILE: append a line per target (target, sanitizer, runs,
#     seconds, runs a second, peak RSS, outcome) to FILE.
#   FUZZ_MINIMIZE=1: afterwards, minimize each target's corpus (cmin) and
#     keep it under fuzz/regressions/TARGET/ as regression seeds.
# The targets that play whole sessions (receiver, datagram_receiver,
# tunnel) read inputs of at most 4 KiB (1 KiB for datagram_receiver):
# hundreds of steps, where longer inputs only repeat them more slowly.
# Exit status 1 if any target crashed; the inputs are then under
# fuzz/regressions/TARGET/.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <(ls fuzz/fuzz_targets | sed 's/\.rs$//')
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "fuzz.sh: needs a nightly toolchain and cargo-fuzz:" >&2
    echo "  rustup toolchain install nightly && cargo install cargo-fuzz" >&2
    exit 2
fi
san=${FUZZ_SANITIZER:-address}
# Builds of each sanitizer kept apart, so switching does not rebuild.
tdir=fuzz/target
[ "$san" = none ] && tdir=fuzz/target-none
crashed=()
for t in "${targets[@]}"; do
    corpus=fuzz/corpus/$t
    mkdir -p "$corpus" "fuzz/regressions/$t"
    # Seed from the kept inputs, so runs start where earlier ones reached.
    cp -n fuzz/regressions/"$t"/* "$corpus"/ 2>/dev/null || true
    case $t in
        datagram_receiver) max_len=1024 ;;
        receiver | tunnel) max_len=4096 ;;
        *) max_len=65536 ;;
    esac
    runs=()
    [ -n "${FUZZ_RUNS:-}" ] && runs=(-runs="$FUZZ_RUNS")
    echo "== $t: ${secs}s${FUZZ_RUNS:+ or $FUZZ_RUNS runs}, sanitizer $san"
    log=$(mktemp)
    start=$(date +%s)
    outcome=ok
    if ! cargo +nightly fuzz run --fuzz-dir fuzz --target-dir "$tdir" -s "$san" "$t" "$corpus" -- \
        -max_total_time="$secs" "${runs[@]}" -rss_limit_mb=2048 -max_len="$max_len" \
        -print_final_stats=1 >"$log" 2>&1; then
        crashed+=("$t")
        outcome=crashed
    fi
    tail -n 12 "$log"
    took=$(($(date +%s) - start))
    done_runs=$(awk '/number_of_executed_units:/ {n = $2} END {print n}' "$log")
    rss=$(awk '/peak_rss_mb:/ {n = $2} END {print n}' "$log")
    if [ -n "${FUZZ_SUMMARY:-}" ]; then
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$(date -u +%FT%TZ)" "$t" "$san" \
            "${done_runs:-0}" "$took" "$(( ${done_runs:-0} / (took > 0 ? took : 1) ))" \
            "${rss:-?}" "$outcome" >>"$FUZZ_SUMMARY"
    fi
    rm -f "$log"
    for a in fuzz/artifacts/"$t"/crash-* fuzz/artifacts/"$t"/oom-* fuzz/artifacts/"$t"/timeout-*; do
        [ -e "$a" ] || continue
        cp "$a" "fuzz/regressions/$t/"
        echo "kept $a as fuzz/regressions/$t/$(basename "$a")"
        crashed+=("$t")
    done
    if [ -n "${FUZZ_MINIMIZE:-}" ]; then
        cargo +nightly fuzz cmin --fuzz-dir fuzz --target-dir "$tdir" -s "$san" "$t" "$corpus" -- \
            -max_len="$max_len" -rss_limit_mb=2048 >/dev/null 2>&1 || true
        # cmin leaves the minimized corpus in place; keep it as seeds.
        rm -f fuzz/regressions/"$t"/seed-*
        for f in "$corpus"/*; do
            [ -e "$f" ] || continue
            cp "$f" "fuzz/regressions/$t/seed-$(basename "$f")"
        done
        echo "kept $(ls "$corpus" | wc -l) minimized inputs of $t under fuzz/regressions/$t/"
    fi
done
if [ ${#crashed[@]} -gt 0 ]; then
    echo "crashed: ${crashed[*]} (inputs kept under fuzz/regressions/; fix, then commit them)"
    exit 1
fi
echo "no crashes in ${#targets[@]} targets, ${secs}s each"
