#!/bin/bash
# Builds the libFuzzer targets (swiftc -sanitize=fuzzer,address) into $1.
# Each target compiles the module under test from Sources/ together with its
# harness, so the fuzzer sees coverage of our code, not of a prebuilt library.
set -euo pipefail
out=${1:?usage: build.sh OUTPUT_DIR}
root=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out/modules"
flags=(-sanitize=fuzzer,address -parse-as-library -O -g)
quiet() { "$@" 2> >(grep -v 'Cannot export local symbol' >&2); }

quiet swiftc "${flags[@]}" -module-name Varlink "$root"/Sources/Varlink/*.swift "$root/Tests/Fuzz/VarlinkFuzz.swift" \
    -o "$out/fuzz-varlink"
quiet swiftc "${flags[@]}" -module-name CookieJar "$root"/Sources/CookieJar/*.swift "$root/Tests/Fuzz/SetCookieFuzz.swift" \
    -o "$out/fuzz-set-cookie"
quiet swiftc "${flags[@]}" -wmo -module-name Secrets -emit-module -emit-module-path "$out/modules/Secrets.swiftmodule" \
    -c "$root"/Sources/Secrets/*.swift -o "$out/modules/Secrets.o"
quiet swiftc "${flags[@]}" -wmo -module-name CookieJar -emit-module -emit-module-path "$out/modules/CookieJar.swiftmodule" \
    -c "$root"/Sources/CookieJar/*.swift -o "$out/modules/CookieJar.o"
quiet swiftc "${flags[@]}" -module-name OAuth -I "$out/modules" "$root/Sources/OAuth/TokenResponse.swift" \
    "$root/Sources/OAuth/JWT.swift" "$root/Sources/OAuth/JSONNumber.swift" "$root/Tests/Fuzz/TokenResponseFuzz.swift" \
    "$out/modules/Secrets.o" "$out/modules/CookieJar.o" \
    -o "$out/fuzz-token-response"
