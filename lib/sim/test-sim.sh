#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The deterministic simulator (docs/ramback-sim.pod) in make check:
# one seed twice (the same trace hash, bit for bit), then a fixed range
# of seeds, about two minutes on one core.  A failure prints the command
# that replays it and its shortest failing prefix.
set -euo pipefail
sim=./sim/ramback-sim
"$sim" --seed=1 --ops=2000 --twice
# Seeds that found bugs: a zero's chunk written to by a racing write
# before the flusher took the zero run was left to a later sweep, and
# FLUSH answered OK with neither the zero nor the write on the store.
for seed in 40 1027; do
    "$sim" --seed=$seed --ops=2000
done
"$sim" --seed=1000 --seeds="${RAMBACK_SIM_SEEDS:-250}" --ops=2000
