#!/usr/bin/env bash
# Renders a run report (pipetrain report / train's metrics.html) to a PNG with headless Chromium,
# as a person would see it at a laptop's width: for the docs, and to look at a page in CI logs.
# Needs Debian's chromium (apt-get install chromium); nothing else, no network.
# Usage: tools/render_report.sh REPORT.html OUT.png [WIDTH [HEIGHT]]   (default 1100 x the page)
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 REPORT.html OUT.png [WIDTH [HEIGHT]]" >&2; exit 2; }
html=$(realpath "$1"); out=$2; w=${3:-1100}; h=${4:-2600}
browser=$(command -v chromium || command -v chromium-browser || true)
[ -n "$browser" ] || { echo "$0: chromium not found (apt-get install chromium)" >&2; exit 1; }
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
timeout 120 "$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$profile" \
  --window-size="$w,$h" --screenshot="$(realpath -m "$out")" "file://$html" >/dev/null 2>&1
[ -s "$out" ] || { echo "$0: chromium wrote no picture" >&2; exit 1; }
echo "$out"
