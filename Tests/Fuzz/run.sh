#!/bin/bash
# Runs every fuzz target for $2 seconds each from the seed corpus in
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
for target in varlink set-cookie token-response redactor; do
    mkdir -p "$out/work-$target"
    log="$out/$target.log"
    timeout $((seconds + 60)) "$out/fuzz-$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 \
        -artifact_prefix="$out/artifacts/$target-" "$out/work-$target" "$root/Tests/Fuzz/corpus/$target" >"$log" 2>&1
    code=$?
    runs=$(grep -oE '^Done [0-9]+ runs' "$log" | grep -oE '[0-9]+' || echo 0)
    crashes=$(ls "$out/artifacts" | grep -c "^$target-" || true)
    echo "fuzz $target: $runs executions in ${seconds} s, exit $code, crash files: $crashes"
    if [ "$code" -ne 0 ] || [ "$crashes" -ne 0 ]; then
        status=1
        grep -E 'ERROR|Fatal error|SUMMARY' "$log" | head -5
    fi
done
exit $status
