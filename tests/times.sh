#!/usr/bin/env bash
# tests/times.sh TIMES.TSV [TITLE] - one pass's test times as a Markdown
# table, slowest first, for tests/TIMES.md.
#
# TIMES.TSV is what tests/run.sh writes into BUILD_DIR/logs/times.tsv
# (test, result, wall_s, cpu_s, kind).  The table gives each test's wall
# and CPU seconds and whether it mostly waited (CPU under half its wall
# time) or computed, then the sums: the wall seconds the tests add up to,
# their CPU seconds (what bounds a pass on N cores from below: CPU / N),
# and how many waited.
set -u
[ $# -ge 1 ] && [ -f "$1" ] || { echo "usage: $0 TIMES.TSV [TITLE]" >&2; exit 2; }
title=${2:-$1}
echo "### $title"
echo
echo "| test | result | wall s | CPU s | mostly |"
echo "|---|---|---:|---:|---|"
tail -n +2 "$1" | sort -t$'\t' -k3,3 -rn | awk -F'\t' '{ printf "| %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5 }'
tail -n +2 "$1" | awk -F'\t' '
    { n++; w += $3; c += $4; if ($5 == "waits") nw++; if ($2 == "fail") nf++ }
    END { printf "\n%d tests (%d failed): %.0f s of wall time added up, %.0f s of CPU; %d mostly waited.\n", n, nf, w, c, nw }'
