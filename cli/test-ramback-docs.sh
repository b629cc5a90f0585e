#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The commands a newcomer is shown must work as printed: every ramback
# command in the README's "Using it" section, and every command that
# ./run.sh's banner prints under "try:", is extracted from the file
# itself and run against a real plugin, with only the socket paths (and
# the path of the built command) substituted.  A command that runs
# until interrupted (status --watch) must show updates and exit 0 on
# SIGINT; every other one must exit 0 by itself.

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/cli/cli-functions.sh"
requires nbdinfo
set -x

start_rb rb back="$TMP/back.img" size=4M
nbd_write "$rb_uri" 0 1048576 7

# run_doc_command SOURCE LINE: run LINE (shell syntax) as printed.
ran=0
run_doc_command () {
    local src=$1 line=$2 pid rc=0 i
    echo "$src: $line"
    ran=$((ran + 1))
    rm -f "$TMP/doc.out" "$TMP/doc.err"
    # The command's own process group, so that ^C (SIGINT) reaches it.
    setsid bash -c "$line" >"$TMP/doc.out" 2>"$TMP/doc.err" </dev/null &
    pid=$!
    if [[ $line == *--watch* ]]; then
        for (( i=0; i<300; i++ )); do
            [ "$(wc -l < "$TMP/doc.out")" -ge 2 ] && break
            kill -0 $pid 2>/dev/null || break
            sleep 0.1
        done
        kill -INT -- -$pid 2>/dev/null || true
    fi
    for (( i=0; i<1200; i++ )); do
        kill -0 $pid 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 $pid 2>/dev/null; then
        kill -9 -- -$pid
        fail "$src: '$line' did not finish"
    fi
    wait $pid || rc=$?
    cat "$TMP/doc.out"
    if [ "$rc" -ne 0 ] || [ -s "$TMP/doc.err" ]; then
        cat "$TMP/doc.err" >&2
        fail "$src: '$line' exited $rc"
    fi
    if [[ $line == *--watch* ]] && [ "$(wc -l < "$TMP/doc.out")" -lt 2 ]; then
        fail "$src: '$line' showed no updates"
    fi
}

# README.md: the sh block of "## Using it"; lines that run ramback(1),
# without their comments; the example socket is ours.
/usr/bin/python3 - "$top_srcdir/README.md" > "$TMP/readme.cmds" <<'EOP'
import re, sys
text = open (sys.argv[1]).read ()
section = text.split ("\n## Using it\n", 1)[1].split ("\n## ", 1)[0]
block = re.search (r"```sh\n(.*?)```", section, re.S).group (1)
for line in block.splitlines ():
    line = re.sub (r"\s+#.*", "", line).strip ()
    if line.split ()[:1] == ["ramback"]:
        print (line)
EOP
[ -s "$TMP/readme.cmds" ] || fail "no ramback commands found in README.md"
while IFS= read -r line; do
    line=${line//\/run\/ramback.sock/$rb_ctl}
    line=${line/#ramback /$RAMBACK }
    run_doc_command README.md "$line"
done < "$TMP/readme.cmds"

# run.sh: the banner is a here-document; expand it as run.sh does, with
# placeholder directories, then substitute ours.
sed -n '/^cat <<EOM$/,/^EOM$/p' "$top_srcdir/run.sh" > "$TMP/banner.sh"
[ -s "$TMP/banner.sh" ] || fail "no banner found in run.sh"
top=/TOP demo=/DEMO back=/DEMO/backing.img
eval "$(cat "$TMP/banner.sh")" > "$TMP/banner.txt"
cat "$TMP/banner.txt"
/usr/bin/python3 - "$TMP/banner.txt" > "$TMP/banner.cmds" <<'EOP'
import re, sys
label = None
for line in open (sys.argv[1]):
    m = re.match (r"  (\w+):\s+(.*)$", line) or re.match (r"\s{10,}(\S.*)$", line)
    if m is None:
        label = None
        continue
    if m.re.groups == 2:
        label, line = m.group (1), m.group (2)
    else:
        line = m.group (1)
    if label == "try":
        print (line.strip ())
EOP
[ "$(grep -c . "$TMP/banner.cmds")" -ge 2 ] ||
    fail "run.sh's banner: expected commands under 'try:': $(cat "$TMP/banner.txt")"
grep -q "/TOP/_build/cli/ramback " "$TMP/banner.cmds" ||
    fail "run.sh's banner shows no ramback command"
while IFS= read -r line; do
    line=${line//\/TOP\/_build\/cli\/ramback/$RAMBACK}
    line=${line//\/DEMO\/control.sock/$rb_ctl}
    line=${line//\/DEMO\/nbd.sock/$rb_sock}
    [[ $line != */TOP/* && $line != */DEMO/* ]] ||
        fail "run.sh's banner: a path the test cannot map: $line"
    run_doc_command run.sh "$line"
done < "$TMP/banner.cmds"

echo "$ran commands run"
stop_rb rb
