#!/usr/bin/env bash
# The kernels' hot loops (for lines marked /* vec */ in src/nn) vectorise when built for AVX2 and
# for AVX-512 (tools/check_vec.sh; `make vec-check` also lists every loop of src/nn that does not).
exec tools/check_vec.sh
