#!/usr/bin/env bash
# Verifies one large synthetic trace (default 1,000,000 events) with `cra trace verify` (release
# build) and with our Appendix B Python verifier (tools/appendix_b.py) in the same run, and prints
# both wall times, the ratio, and each one's peak RSS (from /usr/bin/time -v).
#
#   tools/bench_verify.sh                 # 1,000,000 events, seed 42
#   EVENTS=200000 tools/bench_verify.sh   # smaller
#   SKIP_CLI=1 tools/bench_verify.sh      # measure the engine via cra-trace's verify_file example
#
# The Python side runs twice: `--no-dup-check` is the plain Appendix B loop (json.loads, last key
# wins), the conservative baseline for the ratio; the default mode also refuses duplicate keys as
# cra does.
set -euo pipefail
cd "$(dirname "$0")/.."

EVENTS="${EVENTS:-1000000}"
SEED="${SEED:-42}"
FILE="${FILE:-target/bench/session-${EVENTS}-${SEED}.trace.jsonl}"
command -v python3 >/dev/null || { echo "bench_verify.sh: python3 is required" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "bench_verify.sh: /usr/bin/time is required (apt-get install time)" >&2; exit 1; }

# CARGO_TARGET_DIR is honoured (a separate one avoids waiting on a busy shared target dir).
TARGET="${CARGO_TARGET_DIR:-target}"
echo "== build (release)"
cargo build --release --quiet -p cra-trace --example gen_trace --example verify_file
CRA=("$TARGET/release/cra" trace verify)
CRA_ARGS=(-o json --progress never)
if [ "${SKIP_CLI:-0}" = 1 ] || ! cargo build --release --quiet -p cra-cli --bin cra; then
    # The verifier is cra-trace's; the CLI only formats. Measure the same engine without the CLI.
    echo "bench_verify.sh: the cra binary did not build; measuring cra-trace's verify_file example" >&2
    CRA=("$TARGET/release/examples/verify_file")
    CRA_ARGS=()
fi
mkdir -p "$(dirname "$FILE")"
if [ ! -s "$FILE" ]; then
    echo "== generate $EVENTS events (seed $SEED)"
    "$TARGET/release/examples/gen_trace" "$FILE" "$EVENTS" "$SEED"
fi
echo "file: $FILE ($(stat -c %s "$FILE") bytes, $(wc -l < "$FILE") lines)"
cat "$FILE" > /dev/null   # warm the page cache so both sides read from memory

# run NAME CMD... : prints the command's stdout, records seconds and peak RSS (KiB).
run() {
    local name="$1"; shift
    local tfile; tfile="$(mktemp)"
    local start end
    start=$(date +%s%N)
    /usr/bin/time -v -o "$tfile" "$@" > "target/bench/$name.out" || true
    end=$(date +%s%N)
    local secs rss
    secs=$(python3 -c "print(f'{($end - $start) / 1e9:.3f}')")
    rss=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$tfile")
    rm -f "$tfile"
    echo "$name: ${secs} s, peak RSS ${rss} KiB: $(head -c 200 "target/bench/$name.out")"
    eval "${name}_secs=$secs; ${name}_rss=$rss"
}

echo "== verify"
run cra "${CRA[@]}" "$FILE" "${CRA_ARGS[@]}"
run python_plain python3 tools/appendix_b.py verify "$FILE" --json --no-dup-check
run python_strict python3 tools/appendix_b.py verify "$FILE" --json

python3 - "$cra_secs" "$python_plain_secs" "$python_strict_secs" "$cra_rss" <<'PY'
import sys
cra, plain, strict, rss = map(float, sys.argv[1:])
print("== summary")
print(f"cra trace verify:               {cra:8.3f} s  (peak RSS {rss / 1024:.1f} MiB)")
print(f"appendix_b.py (plain loads):    {plain:8.3f} s  -> cra is {plain / cra:5.1f}x faster")
print(f"appendix_b.py (duplicate check):{strict:8.3f} s  -> cra is {strict / cra:5.1f}x faster")
PY
