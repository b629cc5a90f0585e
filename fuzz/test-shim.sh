#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# fuzz-params links glue/params.c with nbdkit-shim.c instead of
# nbdkit.  Check that the shim's nbdkit_parse_size, nbdkit_parse_bool
# and nbdkit_absolute_path give nbdkit's own results, on a list of edge
# cases and on every value in the params corpus: ask the real nbdkit
# through a test plugin (shimcheck-plugin.c), ask the shim
# (shim-print), compare.
set -euo pipefail
: "${srcdir:=.}" "${NBDKIT:=nbdkit}"
plugin=$PWD/.libs/nbdkit-shimcheck-plugin.so

if ! command -v "$NBDKIT" >/dev/null; then
    echo "$0: SKIP: no nbdkit"
    exit 77
fi

values=(
    "" " " "0" "1" "-0" "-1" "+1" " 1" "1 " "01" "0x10" "1.5M" "1e3"
    "512" "511s" "1s" "1S" "1b" "1B" "1k" "1K" "64K" "64k" "1m" "1M"
    "1g" "1G" "1t" "1T" "1p" "1P" "1e" "1E" "7E" "8E" "8191P" "8192P"
    "9223372036854775807" "9223372036854775808" "9223372036854775807b"
    "18014398509481983s" "18014398509481984s" "99999999999999999999"
    "-99999999999999999999" "1KB" "1KiB" "1kk" "K" "1x" "1 K" $'1\tK'
    "1," "1M " "1.0"
    "true" "TRUE" "True" "t" "T" "yes" "YES" "y" "Y" "on" "ON" "oN"
    "false" "FALSE" "f" "F" "no" "NO" "n" "N" "off" "OFF" "oFf"
    "2" "00" "truee" "yess" "of" "o" "enable" "disabled"
    "/abs/path" "rel/path" "./x" "../x" "nbd://host/export" "a b"
    $'\x01' $'\xc3\xa9' $'\xff'
)
# Every argument of every corpus input: a key=value line's value, or a
# bare line (a value of back=).
shopt -s nullglob
for f in "$srcdir"/corpus/params/*; do
    while IFS= read -r line || [ -n "$line" ]; do
        case "$line" in
            [A-Za-z]*=*) values+=("${line#*=}") ;;
            *) values+=("$line") ;;
        esac
    done < "$f"
done 2>/dev/null

# Deduplicate, keep the order.
declare -A seen=()
args=()
for v in "${values[@]}"; do
    [ -n "${seen["x$v"]+y}" ] && continue
    seen["x$v"]=1
    args+=("size=$v" "bool=$v" "path=$v")
done

# Both see the same working directory: the physical one.
cd -P .
export PWD
PWD=$(pwd -P)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$NBDKIT" -U - --run true "$plugin" "${args[@]}" >"$tmp/nbdkit" 2>"$tmp/err" ||
    { cat "$tmp/err"; exit 1; }
./shim-print "${args[@]}" >"$tmp/shim"

n=$(wc -l <"$tmp/nbdkit")
if [ "$n" -ne ${#args[@]} ]; then
    echo "$0: nbdkit printed $n results for ${#args[@]} parameters"
    exit 1
fi
if ! diff -u "$tmp/nbdkit" "$tmp/shim"; then
    echo "$0: the shim differs from nbdkit (- nbdkit, + shim; values in hex)"
    exit 1
fi
echo "$0: $n results, the shim agrees with $("$NBDKIT" --version | head -1)"
