#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# scripts/check-packages.sh: build the Debian packages, install them,
# test what they installed, and remove them again.
#
#  1. make dist (in _build), then dpkg-buildpackage -us -uc -b on the
#     tarball in a scratch directory, with DEB_BUILD_OPTIONS=nocheck:
#     the test suite runs in the check and distcheck stages;
#  2. lintian: an error fails, warnings are printed;
#  3. apt-get install ./*.deb;
#  4. a smoke test of the installed files only (a scratch directory, the
#     system's PATH, nothing from the build tree): "nbdkit ramback" by
#     name with a data round trip and a check of the backing file after
#     a clean stop, "nbdkit --filter=ramback" by name in front of the
#     memory plugin with a data round trip written back to the plugin,
#     "ramback status" on its control socket, the
#     installed UPS hook, "man -w" for each page, "systemd-analyze
#     verify" on the installed units, and "dkms build" of dm-ramback for
#     the headers of linux-headers-cloud-amd64's kernel: a build only,
#     with DKMS's automatic build and install turned off for the
#     duration; the module is never installed nor loaded here;
#  5. apt-get purge: every file the packages installed is gone, the
#     same packages are installed as before, and the directories the
#     packages and DKMS touch hold the same files as before.
#
# Needs root.  Runs again on the same machine: packages left by an
# interrupted run are purged first.  Leaves the .deb files and the
# lintian report in _build-deb/ (RAMBACK_DEB_DIR).
set -euo pipefail
export PATH="/usr/bin:/bin:/usr/sbin:/sbin:$PATH" LC_ALL=C.UTF-8
export DEBIAN_FRONTEND=noninteractive
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

packages=(nbdkit-plugin-ramback ramback ramback-dkms)
out=${RAMBACK_DEB_DIR:-$top/_build-deb}
apt_opts=(-y -q --no-install-recommends -o DPkg::Lock::Timeout=600)

say () { echo "check-packages: $*"; }
die () { echo "check-packages: FAIL: $*" >&2; exit 1; }
trap 'echo "check-packages: FAIL: line $LINENO: $BASH_COMMAND" >&2' ERR

[ "$(id -u)" -eq 0 ] || die "must run as root (it installs packages)"
for c in dpkg-buildpackage dh dh_dkms dkms lintian apt-get systemd-analyze \
         man nbdinfo nbdcopy nbdsh; do
    command -v "$c" >/dev/null ||
        die "'$c' is missing: run scripts/deps.sh"
done

# One run at a time on a machine (they would share the packages).
exec 9>/run/lock/ramback-check-packages.lock
flock -w 3600 9 || die "another check-packages.sh is still running"

dkms_conf=/etc/dkms/framework.conf.d/zz-ramback-check-packages.conf
no_autoinstall=/etc/dkms/no-autoinstall
marker="# made by ramback's scripts/check-packages.sh for its run; it removes it"
made_no_autoinstall=false

# What a run that was killed (SIGKILL, power) may have left: its
# scratch directory and its DKMS settings.  Packages come below.
rm -rf /var/tmp/ramback-packages.*
rm -f "$dkms_conf"
if [ -f "$no_autoinstall" ] && grep -qxF "$marker" "$no_autoinstall"; then
    rm -f "$no_autoinstall"
fi
tmp=$(mktemp -d /var/tmp/ramback-packages.XXXXXX)

installed () {
    local p
    for p in "${packages[@]}"; do
        dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null |
            grep -qv 'not-installed' && echo "$p"
    done
    return 0
}

purge () {
    local left
    left=$(installed)
    [ -z "$left" ] || apt-get purge "${apt_opts[@]}" $left
}

cleanup () {
    local rc=$?
    set +e
    if [ -n "$(installed)" ]; then
        say "cleaning up: purging $(installed | tr '\n' ' ')"
        purge >"$tmp/cleanup-purge.log" 2>&1 || cat "$tmp/cleanup-purge.log"
    fi
    rm -f "$dkms_conf"
    $made_no_autoinstall && rm -f "$no_autoinstall"
    rm -rf "$tmp"
    exit $rc
}
trap cleanup EXIT INT TERM

# Left by an interrupted run?
if [ -n "$(installed)" ]; then
    say "purging $(installed | tr '\n' ' ')left installed by an earlier run"
    purge >/dev/null
fi
if [ -d /var/lib/dkms/ramback ]; then
    say "removing ramback from DKMS, left by an earlier run"
    dkms remove ramback --all >/dev/null
fi

# ---- 1. build ---------------------------------------------------------
scripts/build.sh _build
make -s -C _build dist >/dev/null
version=$(sed -n 's/^PACKAGE_VERSION = //p' _build/Makefile)
debversion=$(dpkg-parsechangelog -l debian/changelog -S Version)
[ "$version" = "$debversion" ] ||
    die "configure.ac says version $version, debian/changelog $debversion:" \
        "add a debian/changelog entry (dch -v $version)"
mkdir -p "$tmp/src"
tar -C "$tmp/src" -xzf "_build/ramback-$version.tar.gz"
say "dpkg-buildpackage -us -uc -b (DEB_BUILD_OPTIONS=nocheck) in a copy of ramback-$version.tar.gz"
t0=$SECONDS
if ! (cd "$tmp/src/ramback-$version" &&
      DEB_BUILD_OPTIONS="nocheck parallel=$(nproc)" \
          dpkg-buildpackage -us -uc -b) >"$tmp/build.log" 2>&1; then
    tail -60 "$tmp/build.log"
    die "dpkg-buildpackage failed"
fi
say "built in $((SECONDS - t0)) s"
# The README builds in a git checkout: what the build adds to the tree
# must all be ignored by git (.gitignore), or it shows as untracked.
if git -C "$top" rev-parse --git-dir >/dev/null 2>&1; then
    tar -tzf "_build/ramback-$version.tar.gz" |
        sed -n "s|^ramback-$version/||p" | grep -v '/$' | sort >"$tmp/dist.files"
    (cd "$tmp/src/ramback-$version" && find . -type f | sed 's|^\./||' | sort) \
        >"$tmp/built.files"
    comm -13 "$tmp/dist.files" "$tmp/built.files" >"$tmp/added.files"
    { git -C "$top" check-ignore --no-index --stdin <"$tmp/added.files" || :; } |
        sort >"$tmp/ignored.files"
    left=$(comm -23 "$tmp/added.files" "$tmp/ignored.files")
    [ -z "$left" ] ||
        die "the build leaves files git does not ignore (add them to" \
            ".gitignore): $(echo $left)"
    say "the build adds $(wc -l <"$tmp/added.files") files, all ignored by git"
fi
rm -rf "$out"
mkdir -p "$out"
cp "$tmp/build.log" "$out/"
changes=$(ls "$tmp"/src/ramback_"$version"_*.changes)
debs=()
for p in "${packages[@]}"; do
    f=$(ls "$tmp"/src/"$p"_"$version"_*.deb) || die "no .deb for $p"
    cp "$f" "$out/"
    debs+=("$out/$(basename "$f")")
done
cp "$changes" "$out/"
ls -l "${debs[@]}"

# ---- 2. lintian -------------------------------------------------------
say "lintian"
lintian_rc=0
lintian --fail-on error --display-info "$changes" >"$tmp/lintian.txt" 2>&1 ||
    lintian_rc=$?
grep -v '^running with root privileges is not recommended' "$tmp/lintian.txt" \
    >"$out/lintian.txt" || :
sed 's/^/  /' "$out/lintian.txt"
[ "$lintian_rc" -eq 0 ] || die "lintian found errors (above)"
say "lintian: $(grep -c '^E:' "$out/lintian.txt") errors," \
    "$(grep -c '^W:' "$out/lintian.txt") warnings," \
    "$(grep -c '^I:' "$out/lintian.txt") info"

# ---- 3. install -------------------------------------------------------
# What the machine looks like before: the packages, and the directories
# that the packages or DKMS write to.
plugindir=$(pkg-config --variable=plugindir nbdkit)
filterdir=$(pkg-config --variable=filterdir nbdkit)
watched=(/usr/src /var/lib/dkms /lib/modules /etc/dkms /etc/ramback
         /etc/systemd/system /lib/systemd/system /usr/share/ramback
         "$plugindir" "$filterdir" /usr/bin /usr/share/man/man1
         /usr/share/man/man5)
for p in "${packages[@]}"; do watched+=(/usr/share/doc/"$p"); done
snapshot () {
    { find "${watched[@]}" 2>/dev/null || :; } | sort
    dpkg-query -W -f='package ${Package}:${Architecture} ${Version} ${Status}\n' |
        grep -v ' not-installed$' | sort
}
snapshot >"$tmp/before"

# DKMS builds and installs a module for every kernel with headers as
# the package is configured; here only "dkms build" below may build it,
# and it signs with a throwaway key instead of creating DKMS's own.
if [ ! -e "$no_autoinstall" ]; then
    made_no_autoinstall=true
    echo "$marker" >"$no_autoinstall"
fi
mkdir -p "$tmp/mok"
printf 'mok_signing_key=%s\nmok_certificate=%s\n' \
       "$tmp/mok/mok.key" "$tmp/mok/mok.pub" >"$dkms_conf"

say "apt-get install ${debs[*]##*/}"
apt-get install "${apt_opts[@]}" "${debs[@]}" >"$tmp/install.log" 2>&1 ||
    { cat "$tmp/install.log"; die "apt-get install failed"; }
added=$(comm -13 <(grep '^package ' "$tmp/before" | cut -d' ' -f2) \
                 <(snapshot | grep '^package ' | cut -d' ' -f2) |
        sed 's/:.*//' | grep -vxF -f <(printf '%s\n' "${packages[@]}") || true)
[ -z "$added" ] ||
    die "apt-get also installed $added: add it to scripts/deps.sh, so that" \
        "the purge leaves the machine as it was"
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Version}\n' "$p" | grep -qx "$version" ||
        die "$p $version is not installed"
    dpkg -L "$p" >"$tmp/files-$p"
done

# ---- 4. smoke test of the installed files -----------------------------
cd "$tmp"
mkdir smoke
cd smoke
owned () { dpkg -S "$1" >/dev/null 2>&1 || die "$1 is not from a package"; }

# The plugin by name, from nbdkit's plugin directory.
so=$(nbdkit --dump-plugin ramback | sed -n 's/^path=//p')
[ "$so" = "$plugindir/nbdkit-ramback-plugin.so" ] ||
    die "nbdkit ramback loads '$so', not the one in $plugindir"
owned "$so"
say "nbdkit ramback is $so ($(dpkg -S "$so" | cut -d: -f1))"
[ "$(command -v ramback)" = /usr/bin/ramback ] || die "ramback is not /usr/bin/ramback"
owned /usr/bin/ramback

# A data round trip: write random data through NBD, read it back, and
# after the clean stop at the end of --run, find it in the backing file;
# then a second nbdkit populates from that file.
head -c 16M /dev/urandom >data
cat >run.sh <<'EOF'
set -eu
nbdinfo "$uri"
nbdinfo --size "$uri" | grep -qx 16777216
nbdcopy data "$uri"
nbdcopy "$uri" readback
cmp data readback
nbdsh -u "$uri" -c 'h.pwrite(b"ramback!" * 512, 4096)' \
      -c 'assert h.pread(4096, 4096) == b"ramback!" * 512'
ramback status ctl.sock
ramback status --json ctl.sock >status.json
# The installed UPS hook switches to writethrough and back.
RAMBACK_SOCKETS=$PWD/ctl.sock /usr/share/ramback/ramback-ups-hook onbatt
ramback status --json ctl.sock | grep -q '"mode": *"writethrough"'
RAMBACK_SOCKETS=$PWD/ctl.sock /usr/share/ramback/ramback-ups-hook online
ramback status --json ctl.sock | grep -q '"mode": *"writeback"'
ramback sync ctl.sock
# The installed metrics script, as ramback-textfile.service runs it.
mkdir textfile
RAMBACK_SOCKETS=$PWD/ctl.sock RAMBACK_TEXTFILE_DIR=$PWD/textfile \
    /usr/share/ramback/ramback-textfile
grep -qx "ramback_up{socket=\"$PWD/ctl.sock\"} 1" textfile/ramback.prom
EOF
say "nbdkit -U - ramback back=back.img size=16M control=ctl.sock --run 'bash run.sh'"
nbdkit -U - ramback back="$PWD/back.img" size=16M control="$PWD/ctl.sock" \
       --run 'uri="$uri" bash run.sh' || die "the smoke test under nbdkit ramback failed"
dd if=data of=expect bs=4096 status=none
printf 'ramback!%.0s' $(seq 512) |
    dd of=expect bs=4096 seek=1 conv=notrunc status=none
cmp expect back.img || die "the backing file does not hold what was written"
nbdkit -U - ramback back="$PWD/back.img" control="$PWD/ctl.sock" \
       --run 'nbdcopy "$uri" again && ramback wait-populated "$PWD/ctl.sock"' >/dev/null ||
    die "a second nbdkit ramback on the same backing file failed"
cmp expect again || die "a second nbdkit ramback read back other data"
say "round trip through the installed plugin: ok"

# The filter by name, from nbdkit's filter directory, in front of the
# memory plugin, with nbdkit's log filter between them recording what
# reaches the plugin: a data round trip, and the clean stop at the end
# of --run writes the data to the plugin and flushes it.
cat >run-filter.sh <<'EOF'
set -eu
nbdinfo --size "$uri" | grep -qx 67108864
nbdcopy data "$uri"
nbdcopy "$uri" readback
cmp -n 16777216 data readback
ramback status ctl-filter.sock
EOF
say "nbdkit -U - --filter=ramback --filter=log memory 64M control=ctl-filter.sock --run 'bash run-filter.sh'"
nbdkit -v -U - --filter=ramback --filter=log memory 64M \
       logfile="$PWD/plugin.log" control="$PWD/ctl-filter.sock" \
       --run 'uri="$uri" bash run-filter.sh' 2>filter.log ||
    { tail -30 filter.log; die "the smoke test under nbdkit --filter=ramback failed"; }
so=$(sed -n 's/.*registered filter \(.*\) (name ramback)$/\1/p' filter.log)
[ "$so" = "$filterdir/nbdkit-ramback-filter.so" ] ||
    die "nbdkit --filter=ramback loads '$so', not the one in $filterdir"
owned "$so"
say "nbdkit --filter=ramback is $so ($(dpkg -S "$so" | cut -d: -f1))"
grep -q 'ramback: clean stop complete' filter.log ||
    die "nbdkit --filter=ramback: no clean stop (filter.log)"
written=$(sed -n 's/.* Write id=[0-9]* offset=0x[0-9a-f]* count=0x\([0-9a-f]*\) .*/\1/p' \
              plugin.log | while read -r n; do echo $((16#$n)); done |
          awk '{ s += $1 } END { print s + 0 }')
[ "$written" -ge 16777216 ] ||
    die "the filter wrote $written bytes to the plugin, not the 16 MiB written to it"
grep 'Flush id=' plugin.log | tail -1 | grep -q 'return=0' ||
    die "no successful flush of the plugin after the write back (plugin.log)"
say "round trip through the installed filter: ok ($written bytes written back, then a flush)"

# apcupsd's event scripts are links to the hook.
for e in onbattery offbattery doshutdown; do
    [ "$(readlink -f /usr/share/ramback/apcupsd/$e)" = \
      /usr/share/ramback/ramback-ups-hook ] ||
        die "/usr/share/ramback/apcupsd/$e does not lead to the hook"
done

# The manual pages, in their sections.
for page in 1:nbdkit-ramback-plugin 1:nbdkit-ramback-filter 1:ramback \
            5:ramback-control; do
    if ! f=$(man -w "${page%%:*}" "${page#*:}"); then
        grep -rs 'path-exclude.*/usr/share/man' /etc/dpkg/dpkg.cfg.d/ &&
            echo "check-packages: dpkg does not install man pages here (above)" >&2
        die "man -w ${page/:/ } finds nothing"
    fi
    owned "$f"
    say "man ${page%%:*} ${page#*:}: $f"
    man "${page%%:*}" "${page#*:}" 2>&1 >/dev/null | grep . &&
        die "man ${page/:/ } warns (above)"
done

# The units: systemd-analyze checks their syntax, that the programs it runs
# exist, and (Documentation=) that their man pages are installed.
for u in ramback ramback-nbd; do
    unit=/lib/systemd/system/$u@.service
    owned "$unit"
    systemd-analyze verify "$unit" >verify.log 2>&1 ||
        { cat verify.log; die "systemd-analyze verify $unit failed"; }
    if grep . verify.log; then die "systemd-analyze verify $unit warns (above)"; fi
    systemd-analyze verify "$u@smoke.service" >verify.log 2>&1 ||
        { cat verify.log; die "systemd-analyze verify $u@smoke.service failed"; }
    if grep . verify.log; then die "systemd-analyze verify $u@smoke.service warns (above)"; fi
    say "systemd-analyze verify $unit: ok"
done
# The metrics timer and its service (enabled: dh_installsystemd), and
# the Grafana dashboard.
for unit in /lib/systemd/system/ramback-textfile.service \
            /lib/systemd/system/ramback-textfile.timer; do
    owned "$unit"
    systemd-analyze verify "$unit" >verify.log 2>&1 ||
        { cat verify.log; die "systemd-analyze verify $unit failed"; }
    if grep . verify.log; then die "systemd-analyze verify $unit warns (above)"; fi
    say "systemd-analyze verify $unit: ok"
done
owned /usr/share/ramback/grafana/ramback.json
python3 -m json.tool /usr/share/ramback/grafana/ramback.json >/dev/null ||
    die "/usr/share/ramback/grafana/ramback.json is not JSON"

# The dm target's source, built by DKMS for Debian's cloud kernel (the
# QEMU guest's).  Never insmod or modprobe it here.
kver=$(dpkg-query -W -f='${Depends}' linux-headers-cloud-amd64 |
       sed -n 's/.*linux-headers-\([0-9][^ ,]*-cloud-amd64\).*/\1/p')
[ -n "$kver" ] && [ -e "/lib/modules/$kver/build/Makefile" ] ||
    die "no headers for the cloud kernel: install linux-headers-cloud-amd64"
[ -f "/usr/src/ramback-$version/dkms.conf" ] || die "no /usr/src/ramback-$version/dkms.conf"
dkms add -m ramback -v "$version" >/dev/null
t0=$SECONDS
say "dkms build -m ramback -v $version -k $kver"
dkms build -m ramback -v "$version" -k "$kver" >dkms.log 2>&1 ||
    { cat dkms.log; cat "/var/lib/dkms/ramback/$version/build/make.log" 2>/dev/null;
      die "dkms build failed"; }
ko=$(find "/var/lib/dkms/ramback/$version/$kver" -name 'dm-ramback.ko*' | head -1)
[ -n "$ko" ] || die "dkms build made no dm-ramback.ko"
[ "$(modinfo -F vermagic "$ko" | cut -d' ' -f1)" = "$kver" ] ||
    die "$ko is not for $kver"
dkms status -m ramback -v "$version" -k "$kver" | grep -q ': built' ||
    die "dkms status does not say built: $(dkms status -m ramback)"
say "dkms: $(dkms status -m ramback -v "$version" -k "$kver") in $((SECONDS - t0)) s"
[ -e "/lib/modules/$kver/updates/dkms/dm-ramback.ko" ] &&
    die "the module was installed under /lib/modules"
lsmod 2>/dev/null | grep -q '^dm_ramback ' && die "dm_ramback is loaded"

# ---- 5. purge ---------------------------------------------------------
cd "$top"
say "apt-get purge ${packages[*]}"
apt-get purge "${apt_opts[@]}" "${packages[@]}" >"$tmp/purge.log" 2>&1 ||
    { cat "$tmp/purge.log"; die "apt-get purge failed"; }
[ -z "$(installed)" ] || die "still installed after purge: $(installed)"
left=()
for p in "${packages[@]}"; do
    while read -r f; do
        [ "$f" = /. ] && continue
        if [ -e "$f" ] || [ -L "$f" ]; then
            # Directories that other packages share (/usr/share/man/man1)
            # stay.
            [ -d "$f" ] && dpkg -S "$f" >/dev/null 2>&1 && continue
            left+=("$f")
        fi
    done <"$tmp/files-$p"
done
[ ${#left[@]} -eq 0 ] || die "left behind after purge: ${left[*]}"
[ -e "/var/lib/dkms/ramback" ] && die "/var/lib/dkms/ramback is left behind"
rm -f "$dkms_conf"
$made_no_autoinstall && rm -f "$no_autoinstall"
made_no_autoinstall=false
snapshot >"$tmp/after"
if ! diff -u "$tmp/before" "$tmp/after" >"$tmp/diff"; then
    cat "$tmp/diff"
    die "the machine differs after purge (above)"
fi
say "purged: every installed file is gone; packages and files as before"
