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
module() {  # module NAME FILES...: a module to link into the targets below
    local name=$1
    shift
    quiet swiftc "${flags[@]}" -wmo -module-name "$name" -I "$out/modules" -emit-module \
        -emit-module-path "$out/modules/$name.swiftmodule" -c "$@" -o "$out/modules/$name.o"
}
quiet swiftc "${flags[@]}" -module-name Secrets "$root"/Sources/Secrets/*.swift "$root/Tests/Fuzz/RedactorFuzz.swift" \
    -o "$out/fuzz-redactor"
module Loopback "$root"/Sources/Loopback/*.swift
module Secrets "$root"/Sources/Secrets/*.swift
module Varlink "$root"/Sources/Varlink/*.swift
module CookieJar "$root"/Sources/CookieJar/*.swift
quiet swiftc "${flags[@]}" -module-name CookieJar -I "$out/modules" "$root"/Sources/CookieJar/*.swift \
    "$root/Tests/Fuzz/SetCookieFuzz.swift" "$out/modules/Loopback.o" -o "$out/fuzz-set-cookie"
quiet swiftc "${flags[@]}" -module-name OAuth -I "$out/modules" "$root/Sources/OAuth/TokenResponse.swift" \
    "$root/Sources/OAuth/TokenRequest.swift" "$root/Sources/OAuth/ProviderJSON.swift" "$root/Sources/StateStore/SessionRecord.swift" "$root/Sources/StateStore/KeyedToken.swift" \
    "$root/Sources/StateStore/DPoPKeyRecord.swift" \
    "$root/Tests/Fuzz/TokenResponseFuzz.swift" "$out/modules/Secrets.o" "$out/modules/CookieJar.o" \
    "$out/modules/Loopback.o" "$out/modules/Varlink.o" -o "$out/fuzz-token-response"
