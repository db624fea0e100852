#!/usr/bin/env bash
# Interleaved side-by-side timing of the codec cells, for noisy machines: each round runs
# rmq-core and rocketmq-protocol back to back (N operations each, `examples/ops.rs`), for R
# rounds; prints per cell the best time of each side and the median of the per-round ratios.
#
#   cd bench-peers/codec && ./interleaved.sh            # R=10 N=300000
#   R=20 N=1000000 CELLS="decode-json" ./interleaved.sh
set -euo pipefail
cd "$(dirname "$0")"
cargo build --release --locked --example ops >&2
B=target/release/examples/ops
N=${N:-300000}
R=${R:-10}
ns() { local s e; s=$(date +%s%N); "$B" "$1" "$N"; e=$(date +%s%N); echo $(( (e - s) / N )); }
printf '%-16s %10s %10s %8s %14s\n' cell "ours(ns)" "peer(ns)" "best" "median ratio"
for cell in ${CELLS:-encode-json decode-json encode-rocketmq decode-rocketmq}; do
  ours=(); peer=(); ratios=()
  for _ in $(seq "$R"); do
    o=$(ns "$cell-ours"); p=$(ns "$cell-peer")
    ours+=("$o"); peer+=("$p"); ratios+=("$(echo "scale=3; $p / $o" | bc)")
  done
  bo=$(printf '%s\n' "${ours[@]}" | sort -n | head -1)
  bp=$(printf '%s\n' "${peer[@]}" | sort -n | head -1)
  med=$(printf '%s\n' "${ratios[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  printf '%-16s %10s %10s %8s %14s\n' "$cell" "$bo" "$bp" "$(echo "scale=2; $bp / $bo" | bc)" "$med"
done
