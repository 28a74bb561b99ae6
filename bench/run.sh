#!/usr/bin/env bash
echo "bench: nothing yet"
