#!/usr/bin/env bash
# Runs cargo-fuzz targets for a bounded time each, at most two at once, at the lowest CPU
# priority, and prints executions and findings per target (see README.md).
#
#   fuzz/run.sh SECONDS [TARGET...]     (default: every target)
#
# Needs cargo-fuzz (`cargo install cargo-fuzz --locked`). The machine has a stable toolchain, so
# the nightly-only flags cargo-fuzz passes are unlocked with RUSTC_BOOTSTRAP=1; `-s none` builds
# without a sanitizer (the code under test forbids `unsafe`, and the build is much lighter);
# `-a` keeps debug assertions (integer overflow panics) on in the optimised build.
# The targets are built once, then run directly. Each run: corpus in fuzz/corpus/<target> (not committed), seeds from fuzz/seeds/<target>,
# log in fuzz/logs/<target>.log, crashes in fuzz/artifacts/<target>/.
set -euo pipefail
cd "$(dirname "$0")"
secs=${1:?usage: run.sh SECONDS [TARGET...]}
shift
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <(RUSTC_BOOTSTRAP=1 cargo fuzz list)
fi
export RUSTC_BOOTSTRAP=1
nice -n 19 cargo fuzz build -s none -a >/dev/null
bin=target/$(rustc -vV | sed -n 's/^host: //p')/release
mkdir -p logs
max_len() {
    case "$1" in
        atlas_archive | relay_import | trace_jsonl) echo 65536 ;;
        *) echo 8192 ;;
    esac
}
run_one() {
    local t=$1
    mkdir -p "corpus/$t"
    # -timeout: an input running 10 s is a hang; -malloc_limit_mb: one allocation over 512 MiB
    # is an unbounded allocation; -rss_limit_mb: the process over 2 GiB is a leak or a bomb.
    # The binary built above, run directly so that edits during a long run rebuild nothing.
    nice -n 19 "$bin/$t" "corpus/$t" "seeds/$t" \
        -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=512 \
        -max_len="$(max_len "$t")" -print_final_stats=1 >"logs/$t.log" 2>&1 || true
}
summary() {
    local t=$1 log="logs/$1.log"
    local execs time crashes corpus
    execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || echo "?")
    time=$(grep -o 'Done [0-9]* runs in [0-9]* second' "$log" | tail -1 | grep -o 'in [0-9]*' | grep -o '[0-9]*' || echo "$secs (stopped early)")
    crashes=$(grep -cE '^==[0-9]+== ERROR|panicked at|deadly signal|ERROR: libFuzzer' "$log" || true)
    corpus=$(find "corpus/$t" -type f | wc -l)
    printf '%-16s %12s execs %6ss  corpus %5s  findings %s\n' "$t" "$execs" "$time" "$corpus" "$crashes"
}
i=0
pids=()
for t in "${targets[@]}"; do
    run_one "$t" &
    pids+=($!)
    i=$((i + 1))
    if [ $((i % 2)) -eq 0 ]; then
        wait "${pids[@]}"
        pids=()
    fi
done
[ ${#pids[@]} -eq 0 ] || wait "${pids[@]}"
for t in "${targets[@]}"; do
    summary "$t"
done
