#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The control protocol on the wire (ramback-control(5)):
#   - a NUL byte anywhere in a request line gets ERR EINVAL and changes
#     nothing (it used to cut the line short, past the byte check);
#   - the text status escapes control characters in strings, so a
#     backing file whose name holds "\nOK\n" cannot end a reply early:
#     pipelined requests each get their own whole reply, every text
#     line is "key: value", and it agrees with the JSON status field
#     by field (the store's fields too: for a file and an NBD backing
#     store).

source "$top_builddir/tests/functions.sh"
set -x

back="$TMP/back"$'\n'"OK"$'\n'"ERR EIO x"$'\t\r\033'"\\.img"
truncate -s 1M "$back"
start_rb rb back="$back"
# And one whose backing store is NBD (its own status fields).
requires nbdkit
nbdkit -U "$TMP/mem.sock" -P "$TMP/mem.pid" memory 1M
cleanup_fn _kill_pidfile "$TMP/mem.pid"
start_rb nb back="nbd+unix:///?socket=$TMP/mem.sock"

/usr/bin/python3 - "$rb_ctl" "$nb_ctl" <<'EOP'
import json, re, socket, sys

failures = []

def connect (path=sys.argv[1]):
    global s, f
    s = socket.socket (socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect (path)
    f = s.makefile ("rb")

def check (cond, what):
    if not cond:
        print ("FAIL:", what, file=sys.stderr)
        failures.append (what)
    return cond

def reply ():
    lines = []
    while True:
        l = f.readline ()
        if not l.endswith (b"\n"):
            raise SystemExit ("FAIL: connection closed after %r" % lines)
        l = l[:-1]
        if l == b"OK" or l.startswith (b"ERR "):
            return lines, l
        lines.append (l)

def text_escape (v):
    out = ""
    for c in v:
        o = ord (c)
        if c == "\\": out += "\\\\"
        elif c == "\n": out += "\\n"
        elif c == "\r": out += "\\r"
        elif c == "\t": out += "\\t"
        elif o < 0x20 or o == 0x7f: out += "\\x%02x" % o
        else: out += c
    return out

def text_and_json (path):
    connect (path)
    # Three requests in one write: each reply must be whole and in order.
    s.sendall (b"status\nhelp\nstatus json\n")
    text, f1 = reply ()
    helps, f2 = reply ()
    js, f3 = reply ()
    check ((f1, f2, f3) == (b"OK", b"OK", b"OK"), "finals %r" % ((f1, f2, f3),))
    check (len (helps) > 0 and helps[0].startswith (b"status "),
           "the reply to help is %r (the status reply ended early)" % helps[:3])
    check (len (js) == 1 and js[0].startswith (b"{"),
           "the reply to status json is %r" % js[:3])
    for l in text:
        check (re.fullmatch (rb"[a-z_]+: [\x20-\x7e]*", l),
               "text status line %r is not 'key: value' in printable ASCII" % l)
    if len (js) != 1:
        return
    o = json.loads (js[0])
    fields = {}
    for l in text:
        k, _, v = l.decode ().partition (": ")
        fields[k] = v
    check (list (fields) == list (o),
           "text keys %s != JSON keys %s" % (list (fields), list (o)))
    check (any (k.startswith ("store_") for k in o), "no store fields: %s" % o)
    for k, v in o.items ():
        if isinstance (v, str):
            check (fields.get (k) == text_escape (v),
                   "%s: text %r, JSON %r" % (k, fields.get (k), v))
    check ("\n" not in "".join (fields.values ()), "raw newline in a value")

for p in sys.argv[1:3]:
    text_and_json (p)

# A NUL byte anywhere in the line: refused, and nothing changes.
connect ()
for req in (b"mode writethrough\0 junk \xff\n", b"mode writethrough\0\n",
            b"\0mode writethrough\n", b"mode\0writethrough\n",
            b"status\0\n", b"\0\n", b"sync\0 5\n"):
    s.sendall (req)
    lines, final = reply ()
    check (final.startswith (b"ERR EINVAL ") and not lines,
           "%r got %r %r" % (req, lines, final))
s.sendall (b"status json\n")
lines, final = reply ()
check (final == b"OK" and len (lines) == 1 and
       json.loads (lines[0])["mode"] == "writeback",
       "the mode changed: %r" % lines)
# Still in step, on the same connection.
s.sendall (b"help\n")
lines, final = reply ()
check (final == b"OK" and lines and lines[0].startswith (b"status "),
       "after NULs: %r" % lines)
sys.exit (1 if failures else 0)
EOP

stop_rb rb
stop_rb nb
