#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The model test (tests/test-model.sh: random unaligned writes, trims
# and zeroes against a shadow model, checked through NBD, in the store
# after syncs, in writethrough after every check, and after SIGTERM)
# with the backing store an RBD image instead of a file.
exec env RBD_MODEL=1 /bin/bash "$top_srcdir/tests/test-model.sh"
