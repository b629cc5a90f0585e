#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Every field of "status json" is documented, and every documented field
# is emitted.  ramback is started in several configurations (back= a
# file; back= an NBD URI; with journal=; the filter form), and the keys
# of each "status json" reply are compared with the names in the
# STATUS FIELDS section of docs/ramback-control.pod (the names at the
# start of its verbatim lines) and, for the filter form, the C<store_*>
# names of the STATUS section of docs/nbdkit-ramback-filter.pod.
#
# Also: store_path is a JSON string escaped as JSON (not mangled), so a
# backing file named with a quote, a backslash and a control character
# is shown as it is, and so is a path that is long once escaped.

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/tests/remote-functions.sh"
requires truncate
set -x

size=4M
keys_dir="$TMP/keys"
mkdir "$keys_dir"

# save_keys CONFIG SOCK: the keys of "status json" in keys_dir/CONFIG.
save_keys () {
    ctl "$2" status json >"$keys_dir/$1.json"
    /usr/bin/python3 -c '
import json, sys
for k in json.load (open (sys.argv[1])): print (k)' \
        "$keys_dir/$1.json" >"$keys_dir/$1"
}

# back= a file (named with a quote, a backslash and a tab: see below).
back_file="$TMP/back \"q\" \\b"$'\t'"t.img"
start_rb f back="$back_file" size=$size
save_keys file "$f_ctl"
path=$(/usr/bin/python3 -c '
import json, sys
print (json.load (open (sys.argv[1]))["store_path"], end="")' \
           "$keys_dir/file.json")
path_ok=true
if [ "$path" != "$back_file" ]; then
    echo "FAIL: store_path in status json is '$path', the file is '$back_file'"
    path_ok=false
fi
stop_rb f

# A long path, longer than 2 KiB once escaped: still whole, still JSON.
long_dir=$TMP
for i in 1 2 3 4 5 6 7 8 9 10; do
    long_dir="$long_dir/$(printf '"%.0s' {1..100})$(printf 'd%.0s' {1..100})"
done
mkdir -p "$long_dir"
long_file="$long_dir/back.img"
start_rb lp back="$long_file" size=$size
path=$(ctl "$lp_ctl" status json | /usr/bin/python3 -c '
import json, sys
print (json.load (sys.stdin)["store_path"], end="")') ||
    fail "status json with a ${#long_file}-byte store_path is not JSON"
[ "$path" = "$long_file" ] ||
    fail "store_path in status json is not the ${#long_file}-byte path"
stop_rb lp

# back= a file, journal= a file.
truncate -s 2M "$TMP/j.img"
start_rb j back="$TMP/back2.img" size=$size journal="$TMP/j.img"
save_keys journal "$j_ctl"
stop_rb j

# back= an NBD URI.
start_remote m memory $size
start_rb n back="$m_uri"
save_keys nbd "$n_ctl"
stop_rb n

# The filter form over the file plugin.
RAMBACK_FORM=filter
start_rb fl back="$TMP/back3.img" size=$size
save_keys filter "$fl_ctl"
stop_rb fl
RAMBACK_FORM=plugin

/usr/bin/python3 - "$top_srcdir/docs" "$keys_dir" <<'EOP'
import os, re, sys
docs, keys_dir = sys.argv[1], sys.argv[2]

def section (pod, head):
    text = open (os.path.join (docs, pod)).read ()
    m = re.search (r"^=head1 " + head + r"\n(.*?)^=head1 ", text,
                   re.S | re.M)
    assert m, "%s: no =head1 %s" % (pod, head)
    return m.group (1)

# Verbatim lines " name   description": the names.
control = set (re.findall (r"^ ([a-z][a-z0-9_]*)(?:\s|$)",
                           section ("ramback-control.pod", "STATUS FIELDS"),
                           re.M))
filt = set (re.findall (r"C<(store_[a-z0-9_]+)>",
                        section ("nbdkit-ramback-filter.pod", "STATUS")))
documented = control | filt

# Documented fields no configuration here emits, and why.
conditional = {
}

emitted = set ()
bad = False
for cfg in ("file", "journal", "nbd", "filter"):
    keys = set (open (os.path.join (keys_dir, cfg)).read ().split ())
    emitted |= keys
    undoc = sorted (keys - documented)
    if undoc:
        print ("FAIL: %s: emitted, not documented: %s" % (cfg, " ".join (undoc)))
        bad = True
missing = sorted (documented - emitted - set (conditional))
if missing:
    print ("FAIL: documented, emitted by no configuration: %s" % " ".join (missing))
    bad = True
print ("%d fields documented, %d emitted" % (len (documented), len (emitted)))
sys.exit (1 if bad else 0)
EOP
$path_ok || fail "store_path is not the backing file's name (see above)"
