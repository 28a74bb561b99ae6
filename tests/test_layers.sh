#!/usr/bin/env bash
# The layering of src/: includes go only down the order in tools/check_layers.sh, and no two
# library files call each other (docs/architecture.md). Fails naming the file and line.
BUILD=${BUILD:-build}
exec tools/check_layers.sh "$BUILD"
