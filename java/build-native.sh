#!/usr/bin/env bash
# Builds liboverlap (crates/overlap-c) with cargo and puts it where the jar
# takes it from: target/native/linux-x86_64/liboverlap.so (debug info
# stripped). Run by Maven (generate-resources); on its own: java/build-native.sh.
#
#   OVERLAP_NATIVE_LIB=/path/liboverlap.so  use that file instead of building
#   CARGO_TARGET_DIR                         honoured, as cargo does
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
out="$here/target/native/linux-x86_64"
mkdir -p "$out"
if [ -n "${OVERLAP_NATIVE_LIB:-}" ]; then
    src=$OVERLAP_NATIVE_LIB
else
    if ! command -v cargo >/dev/null 2>&1; then
        echo "build-native.sh: cargo not found: install Rust, or set OVERLAP_NATIVE_LIB to a built liboverlap.so" >&2
        exit 1
    fi
    (cd "$root" && cargo build --release -p overlapped-c ${CARGO_BUILD_JOBS:+-j "$CARGO_BUILD_JOBS"})
    target=${CARGO_TARGET_DIR:-$root/target}
    case $target in /*) ;; *) target="$root/$target" ;; esac
    src="$target/release/liboverlap_c.so"
fi
[ -f "$src" ] || { echo "build-native.sh: $src not found" >&2; exit 1; }
if [ ! -f "$out/liboverlap.so" ] || [ "$src" -nt "$out/liboverlap.so" ]; then
    if command -v strip >/dev/null 2>&1; then
        strip --strip-debug -o "$out/liboverlap.so.tmp" "$src"
    else
        cp "$src" "$out/liboverlap.so.tmp"
    fi
    mv "$out/liboverlap.so.tmp" "$out/liboverlap.so"
fi
echo "build-native.sh: $out/liboverlap.so (from $src)"
