#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The filter in front of nbdkit's ssh plugin, talking SFTP to an sshd
# that this test starts on 127.0.0.1 with throw-away host and client
# keys (root logs in with the client key only).  The ssh plugin
# serialises requests per connection, so the filter opens four
# contexts (four ssh sessions) and runs a worker on each.
#
# The round trip of the NBD tests (remote-functions.sh): populate, check
# against the image, random writes and zeroes, clean stop, image ==
# model; a second start populates from it and reads the model back.
# Then fsync=wait: after each NBD FLUSH the image file itself (read
# directly) equals the model.
#
# Skipped (exit 77), saying why, if sshd is not installed or cannot be
# started here.

RAMBACK_FORM=filter
source "$top_builddir/tests/functions.sh"
source "$top_srcdir/tests/core-functions.sh"
source "$top_srcdir/tests/remote-functions.sh"

SSHD=/usr/sbin/sshd
requires ssh-keygen
if [ ! -x "$SSHD" ]; then
    echo "$0: SKIP: $SSHD is not installed (Debian: openssh-server)"
    exit 77
fi
if ! nbdkit ssh --version >/dev/null 2>&1; then
    echo "$0: SKIP: nbdkit's ssh plugin is not installed"
    exit 77
fi

# sshd running as root needs its privilege separation directory.
if [ ! -d /run/sshd ] && ! mkdir -p -m 0755 /run/sshd 2>/dev/null; then
    echo "$0: SKIP: /run/sshd is missing and cannot be created"
    exit 77
fi

d="$TMP/ssh"
mkdir -m 0700 "$d"
ssh-keygen -q -t ed25519 -N '' -f "$d/host_key"
ssh-keygen -q -t ed25519 -N '' -f "$d/id"
cp "$d/id.pub" "$d/authorized_keys"
user=$(id -un)

port=
for (( try=0; try<5; try++ )); do
    port=$(py -c '
import socket
s = socket.socket ()
s.bind (("127.0.0.1", 0))
print (s.getsockname ()[1])')
    cat > "$d/sshd_config" <<EOF
ListenAddress 127.0.0.1
Port $port
HostKey $d/host_key
PidFile $d/sshd.pid
AuthorizedKeysFile $d/authorized_keys
AuthenticationMethods publickey
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
StrictModes no
UsePAM no
Subsystem sftp internal-sftp
EOF
    "$SSHD" -D -e -f "$d/sshd_config" >"$d/sshd.log" 2>&1 &
    sshd_pid=$!
    cleanup_fn _kill_if_running "$sshd_pid"
    for (( i=0; i<100; i++ )); do
        grep -q "Server listening" "$d/sshd.log" && break
        kill -0 "$sshd_pid" 2>/dev/null || break
        sleep 0.1
    done
    grep -q "Server listening" "$d/sshd.log" && break
    kill "$sshd_pid" 2>/dev/null || true
    if ! grep -q "Address already in use" "$d/sshd.log"; then
        echo "$0: SKIP: sshd did not start:"
        cat "$d/sshd.log"
        exit 77
    fi
done
grep -q "Server listening" "$d/sshd.log" ||
    { echo "$0: SKIP: no free port for sshd"; exit 77; }
echo "sshd on 127.0.0.1:$port (pid $sshd_pid)"
echo "[127.0.0.1]:$port $(cut -d' ' -f1,2 "$d/host_key.pub")" > "$d/known_hosts"

size=$(( 24 * 1024 * 1024 + 12288 ))
img="$TMP/s.img"
rio init "$img" "$size" 5 10

ssh_args=(ssh host=127.0.0.1 port="$port" user="$user"
          identity="$d/id" known-hosts="$d/known_hosts" path="$img")
RB_PLUGIN=("${ssh_args[@]}")
roundtrip s unused "$img"

start_rb sw -- fsync=wait
RB_PLUGIN=()
py - "$sw_uri" "$sw_ctl" "$img" <<'EOF'
import random, sys
import model as M

uri, ctlpath, img = sys.argv[1:]

def body ():
    rng = random.Random (3)
    ctl = M.Control (ctlpath)
    st = ctl.status ()
    M.log ("ssh store: %d contexts, thread model %s, can_flush %r, zero %s"
           % (st["store_connections"], st["store_thread_model"],
              st["store_can_flush"], st["store_zero"]))
    if st["store_connections"] != 4 or \
       st["store_thread_model"] != "serialize_requests":
        M.fail ("expected 4 contexts, serialize_requests: %r" % st)
    m = M.Model.from_file (img)
    h = M.connect (uri)
    for rnd in range (3):
        for _ in range (10):
            off, n = M.rand_extent (rng, m.size, 65536, 1 << 20)
            data = rng.randbytes (n)
            h.pwrite (data, off)
            m.write (off, data)
        off, n = M.rand_extent (rng, m.size, 65536, 1 << 20)
        h.zero (n, off)
        m.zero (off, n)
        h.flush ()
        m.check_file (img, "image after FLUSH over ssh (round %d)" % rnd)
    m.check_nbd (h)
    h.shutdown ()

M.main (body)
EOF
stop_rb sw
kill "$sshd_pid"
wait "$sshd_pid" 2>/dev/null || true
echo PASS
