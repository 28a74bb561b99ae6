#!/usr/bin/env bash
echo "demo: not implemented yet" >&2; exit 1
