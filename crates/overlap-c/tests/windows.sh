#!/bin/sh
# liboverlap on Windows, from Linux: builds overlap.dll with mingw
# (x86_64-pc-windows-gnu), installs it as overlap.dll with its import
# library liboverlap.dll.a (cargo names the file overlap_c.dll, as it
# names liboverlap_c.so on Linux), compiles the portable C tests with
# x86_64-w64-mingw32-gcc against it and runs each under Wine on the I/O
# completion port driver and on the thread pool, and the README's example
# (examples/c/hello.c) on both. Exit status: 0 when every run passed.
#
#   CARGO_TARGET_DIR=/some/dir crates/overlap-c/tests/windows.sh
#
# Run here: tests/c/windows.c (files by path and adopted HANDLEs, blocking
# calls, ports, posted completions, errors as errno with the Win32 code
# beside, shutdown); api.c without what is Linux's (a pipe read to cancel,
# adopting a descriptor, evicting pages with posix_fadvise); torture.c
# without fork-in-flight (no fork()) and injected-failure (its small file
# system is an ext4 image); threads.c. Linux only (tests/c.rs): fork.c,
# and the examples asynchio.c and bench.c (Linux's system calls).
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
root=$(cd "$here/../.." && pwd)
eval "$("$root/scripts/windows/setup" --env | grep ^export)"
target_dir=${CARGO_TARGET_DIR:-$root/target}
export CARGO_TARGET_DIR="$target_dir"
/usr/bin/cargo build -Zbuild-std --target x86_64-pc-windows-gnu -p overlapped-c
built="$target_dir/x86_64-pc-windows-gnu/debug"
work=$(mktemp -d "${TMPDIR:-/tmp}/overlap-c-windows.XXXXXX")
trap 'rm -rf "$work"' EXIT
cp "$built/overlap_c.dll" "$work/overlap.dll"
{
    echo "LIBRARY overlap.dll"
    echo "EXPORTS"
    x86_64-w64-mingw32-nm -g --defined-only "$built/liboverlap_c.dll.a" |
        awk '$2 == "T" && $3 ~ /^overlap_/ { print $3 }' | sort -u
} >"$work/overlap.def"
x86_64-w64-mingw32-dlltool -d "$work/overlap.def" -D overlap.dll -l "$work/liboverlap.dll.a"

export WINEDEBUG=-all WINEPREFIX="${WINEPREFIX:-$HOME/.wine}"
failed=0
passed=0
for name in windows api threads torture; do
    x86_64-w64-mingw32-gcc -std=c11 -O1 -g -Wall -Wextra -Werror -pthread \
        -I "$here/include" -I "$here/tests/c" "$here/tests/c/$name.c" \
        "$work/liboverlap.dll.a" -static -o "$work/$name.exe"
    for driver in iocp pool; do
        mkdir -p "$work/data-$driver"
        if OVERLAP_DRIVER=$driver OVERLAP_TEST_DIR="Z:$work/data-$driver" \
            OVERLAP_SMALL_FS_SKIPPED="scripts/small-fs mounts an ext4 image, which is Linux's" \
            timeout 300 /usr/lib/wine/wine64 "$work/$name.exe"; then
            echo "$name on $driver: ok"
            passed=$((passed + 1))
        else
            echo "$name on $driver: FAILED ($?)"
            failed=$((failed + 1))
        fi
    done
done

# examples/c/hello.c, the README's example, is portable: it reads 4 KiB.
x86_64-w64-mingw32-gcc -std=c11 -O1 -Wall -Wextra -Werror -I "$here/include" \
    "$root/examples/c/hello.c" "$work/liboverlap.dll.a" -static -o "$work/hello.exe"
head -c 8192 /dev/urandom >"$work/hello-data"
for driver in iocp pool; do
    out=$(OVERLAP_DRIVER=$driver timeout 120 /usr/lib/wine/wine64 "$work/hello.exe" \
        "Z:$work/hello-data" 2>&1) || true
    if [ "$(printf '%s' "$out" | tr -d '\r')" = "read 4096 bytes (user datum 42)" ]; then
        echo "hello on $driver: ok"
        passed=$((passed + 1))
    else
        echo "hello on $driver: FAILED: $out"
        failed=$((failed + 1))
    fi
done
echo "windows C tests: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
