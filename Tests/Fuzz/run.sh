#!/bin/bash
# Runs every fuzz target for $2 seconds each (as many at once as there are cores) from the seed corpus in
# Tests/Fuzz/corpus/NAME (new inputs go to $1/work-NAME, crashes to
# $1/artifacts). Prints executions and crashes per target; exits 1 on a crash.
set -uo pipefail
out=${1:?usage: run.sh BUILD_DIR SECONDS}
seconds=${2:?usage: run.sh BUILD_DIR SECONDS}
root=$(cd "$(dirname "$0")/../.." && pwd)
export SWIFT_BACKTRACE=enable=no
export LSAN_OPTIONS="suppressions=$root/Tests/Fuzz/lsan.supp:print_suppressions=0"
mkdir -p "$out/artifacts"
status=0
# One target per core at a time: the same time each, a fraction of the wall time.
fuzz() {
    local target=$1
    mkdir -p "$out/work-$target"
    timeout $((seconds + 60)) "$out/fuzz-$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 \
        -artifact_prefix="$out/artifacts/$target-" "$out/work-$target" "$root/Tests/Fuzz/corpus/$target" \
        >"$out/$target.log" 2>&1
    echo $? >"$out/$target.exit"
}
report() {
    local target=$1 code runs crashes
    code=$(cat "$out/$target.exit")
    runs=$(grep -oE '^Done [0-9]+ runs' "$out/$target.log" | grep -oE '[0-9]+' || echo 0)
    crashes=$(ls "$out/artifacts" | grep -c "^$target-" || true)
    echo "fuzz $target: $runs executions in ${seconds} s, exit $code, crash files: $crashes"
    if [ "$code" -ne 0 ] || [ "$crashes" -ne 0 ]; then
        status=1
        grep -E 'ERROR|Fatal error|SUMMARY' "$out/$target.log" | head -5
    fi
}
targets=(varlink set-cookie token-response redactor)
cores=$(nproc)
for ((i = 0; i < ${#targets[@]}; i += cores)); do
    batch=("${targets[@]:i:cores}")
    for target in "${batch[@]}"; do fuzz "$target" & done
    wait
    for target in "${batch[@]}"; do report "$target"; done
done
exit $status
