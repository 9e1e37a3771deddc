#!/usr/bin/env bash
# Runs every fuzz target under cargo-fuzz (libFuzzer) for a bounded time,
# then keeps any crash as a regression input that the stable test suite
# replays (crates/fuzzing/tests/regressions.rs).
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
#
# Needs a nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz`).
# Default: 60 s per target, every target. FUZZ_SANITIZER=address (the
# default of cargo-fuzz) or none (faster; haul has little unsafe code). Exit status 1 if any target
# crashed; the inputs are then under fuzz/regressions/TARGET/.
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
crashed=()
for t in "${targets[@]}"; do
    corpus=fuzz/corpus/$t
    mkdir -p "$corpus" "fuzz/regressions/$t"
    # Seed from the kept inputs, so runs start where earlier ones reached.
    cp -n fuzz/regressions/"$t"/* "$corpus"/ 2>/dev/null || true
    echo "== $t: ${secs}s"
    if ! cargo +nightly fuzz run --fuzz-dir fuzz -s "${FUZZ_SANITIZER:-address}" "$t" "$corpus" -- \
        -max_total_time="$secs" -rss_limit_mb=2048 -max_len=65536 \
        -print_final_stats=1 2>&1 | tail -n 12; then
        crashed+=("$t")
    fi
    for a in fuzz/artifacts/"$t"/crash-* fuzz/artifacts/"$t"/oom-* fuzz/artifacts/"$t"/timeout-*; do
        [ -e "$a" ] || continue
        cp "$a" "fuzz/regressions/$t/"
        echo "kept $a as fuzz/regressions/$t/$(basename "$a")"
        crashed+=("$t")
    done
done
if [ ${#crashed[@]} -gt 0 ]; then
    echo "crashed: ${crashed[*]} (inputs kept under fuzz/regressions/; fix, then commit them)"
    exit 1
fi
echo "no crashes in ${#targets[@]} targets, ${secs}s each"
