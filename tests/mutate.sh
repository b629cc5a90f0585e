#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Mutation testing: does the fast suite catch realistic single bugs?
#
#   tests/mutate.sh [NAME...]      all mutations, or the named ones
#
# Each line of tests/mutations.txt is one bug, as a GNU sed script for
# one file.  The source tree (its tracked files, as they are in the
# working tree) is copied once to a scratch directory and built there;
# the real tree is never modified.  Then, one mutation at a time: apply
# it, rebuild (incrementally), run the fast suite, restore the file.
# The fast suite stops at its first failure:
#   1. the lib unit tests (make -C lib check);
#   2. the shell tests in MUTATE_TESTS (default below).
# Result per mutation:
#   KILLED     the suite failed (the test that caught it is shown)
#   SURVIVED   the suite passed: no test catches this bug
#   NOMATCH    the sed script changed nothing: re-target it
#   BUILD      the mutated tree does not compile: fix the script
# and the score: killed / (killed + survived).
#
# Environment:
#   MUTATE_LIST     the list (default: tests/mutations.txt)
#   MUTATE_TESTS    shell tests of the fast suite ("" for none)
#   MUTATE_TIMEOUT  seconds for each step of the suite (default 900); a
#                   suite that hangs counts as killed ("timeout")
#   MUTATE_DIR      scratch directory (default: a new one under TMPDIR,
#                   removed at the end unless MUTATE_KEEP=1)
# Long: run it under nice.  Each suite run takes a minute or two.

set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
list=${MUTATE_LIST:-$top/tests/mutations.txt}
tests=${MUTATE_TESTS-"test-acked-durable.sh test-zero-punch.sh \
test-fsync-wait.sh test-error-backing.sh test-enospc.sh test-model.sh \
test-populate.sh test-sync-error.sh test-journal-cow.sh test-filter-caps.sh \
test-journal-crash.sh test-remote-lost-cache.sh"}
tmo=${MUTATE_TIMEOUT:-900}

scratch=${MUTATE_DIR:-$(mktemp -d "${TMPDIR:-/var/tmp}/ramback-mutate.XXXXXX")}
cleanup () {
    if [ "${MUTATE_KEEP:-}" != 1 ] && [ -z "${MUTATE_DIR:-}" ]; then
        rm -rf "$scratch"
    fi
}
trap cleanup EXIT

# Parse the list: name|file|script|description, " | " separated.
names=() files=() scripts=() descs=()
while IFS= read -r line || [ -n "$line" ]; do
    case "$line" in ''|'#'*) continue ;; esac
    name=${line%% | *}; rest=${line#* | }
    file=${rest%% | *}; rest2=${rest#* | }
    script=${rest2%% | *}; desc=${rest2#* | }
    if [ "$name" = "$line" ] || [ "$file" = "$rest" ] ||
           [ "$script" = "$rest2" ]; then
        echo "mutate.sh: $list: cannot parse: $line" >&2
        exit 1
    fi
    if [ ! -f "$top/$file" ]; then
        echo "mutate.sh: $list: $name: no file $file" >&2
        exit 1
    fi
    names+=("$name") files+=("$file") scripts+=("$script") descs+=("$desc")
done < "$list"

selected=("$@")
want () {
    local n
    [ ${#selected[@]} -eq 0 ] && return 0
    for n in "${selected[@]}"; do [ "$n" = "$1" ] && return 0; done
    return 1
}

echo "scratch tree: $scratch"
src="$scratch/src"
if [ ! -d "$src" ]; then
    mkdir -p "$src" "$scratch/pristine"
    ( cd "$top" && git ls-files -z | tar --null -T - -cf - ) | tar -xf - -C "$src"
    ( cd "$top" && git ls-files -z | tar --null -T - -cf - ) |
        tar -xf - -C "$scratch/pristine"
fi
echo "building the unmutated tree..."
if ! "$src/scripts/build.sh" _build >"$scratch/build.log" 2>&1; then
    tail -30 "$scratch/build.log" >&2
    echo "mutate.sh: the unmutated tree does not build" >&2
    exit 1
fi
build="$src/_build"

# run_suite LOG: 0 if the fast suite passes; else prints what failed.
run_suite () {
    local log=$1 rc=0 t
    timeout -k 30 "$tmo" make -C "$build/lib" check >"$log" 2>&1 || rc=$?
    if [ $rc -ne 0 ]; then
        [ $rc -eq 124 ] && { echo "timeout in lib"; return 1; }
        t=$(grep -E '^(FAIL|ERROR):' "$log" | sed 's/^[A-Z]*: //' || true)
        if [ -z "$t" ]; then
            echo "lib: make check"
            return 1
        fi
        # Each failing program, with the start of what it said.
        for t in $t; do
            printf 'lib/%s: %.70s; ' "$t" "$(grep -m1 -E \
                '^(Bail out!|not ok)' "$build/lib/$t.log" |
                sed 's/^Bail out! //' || true)"
        done
        echo
        return 1
    fi
    # shellcheck disable=SC2086
    for t in $tests; do
        rc=0
        timeout -k 30 "$tmo" make -C "$build/tests" check TESTS="$t" \
            >>"$log" 2>&1 || rc=$?
        if [ $rc -ne 0 ]; then
            [ $rc -eq 124 ] && { echo "timeout in $t"; return 1; }
            echo "tests/$t"
            return 1
        fi
    done
    return 0
}

echo "checking that the unmutated tree passes the fast suite..."
if ! why=$(run_suite "$scratch/baseline.log"); then
    echo "mutate.sh: the unmutated tree fails the fast suite ($why); see" \
         "$scratch/baseline.log" >&2
    MUTATE_KEEP=1
    exit 1
fi

results=()
killed=0 survived=0
for i in "${!names[@]}"; do
    name=${names[i]} file=${files[i]}
    want "$name" || continue
    start=$(date +%s)
    cp "$scratch/pristine/$file" "$src/$file"
    sed -i -e "${scripts[i]}" "$src/$file"
    if cmp -s "$scratch/pristine/$file" "$src/$file"; then
        res=NOMATCH by=
    elif ! make -C "$build" -j2 >"$scratch/$name.build.log" 2>&1; then
        res=BUILD by="see $scratch/$name.build.log"
    elif by=$(run_suite "$scratch/$name.log"); then
        res=SURVIVED by=
        survived=$((survived + 1))
    else
        res=KILLED
        killed=$((killed + 1))
    fi
    # Restore with a new mtime, so the next build recompiles it.
    cp "$scratch/pristine/$file" "$src/$file"
    secs=$(( $(date +%s) - start ))
    line=$(printf '%-26s %-9s %5ss  %s' "$name" "$res" "$secs" "$by")
    echo "$line"
    results+=("$line")
done
make -C "$build" -j2 >/dev/null 2>&1 || true

echo
echo "mutation                   result    time   caught by"
printf '%s\n' "${results[@]}"
total=$((killed + survived))
if [ $total -gt 0 ]; then
    echo "score: $killed killed of $total ($(( 100 * killed / total ))%)"
fi
