#!/usr/bin/env bash
# Builds the no-allocator gateway firmware images for thumbv7em-none-eabihf, prints their
# section sizes (.vector_table/.text/.rodata/.data/.bss) and fails when a budget is exceeded.
# Flash is everything stored there: the vector table, .text, .rodata and .data's initial
# values ("flash in all" is the figure BENCHMARKS.md's table gives first; the "flash code" line,
# .text + .rodata, is the one the older tables in docs/bench-log/firmware.md use).
# - the producer-only telemetry image (issue 14): at most 64 KiB of flash and 24 KiB of
#   static RAM (.data + .bss, socket and frame buffers included);
# - the store-and-forward image (feature `store-forward`, issue 19): at most 80 KiB of flash
#   and 32 KiB of static RAM (the QEMU test adds the measured stack to it);
# - the downlink image (feature `downlink`: producer, command consumer and outbox on one
#   client, issue 19): the same budget (its client lives on `main`'s stack, so the QEMU test
#   checks static RAM + stack against 32 KiB).
# Needs the rustup target and llvm-size or binutils' `size`.
set -euo pipefail
cd "$(dirname "$0")"
check() { # name, cargo args, target dir, flash budget, RAM budget[, note]
  local name=$1 args=$2 dir=$3 flash_max=$4 ram_max=$5 note=${6:-}
  # shellcheck disable=SC2086
  cargo build --release --locked $args --target-dir "$dir"
  local elf=$dir/thumbv7em-none-eabihf/release/rmq-firmware sizes
  echo "$name firmware: $elf"
  if command -v llvm-size >/dev/null; then sizes=$(llvm-size -A "$elf"); else sizes=$(size -A "$elf"); fi
  echo "$sizes" | grep -E '^(section|\.vector_table|\.text|\.rodata|\.data|\.bss|\.uninit|Total)'
  sec() { echo "$sizes" | awk -v s="$1" '$1 == s { print $2 }'; }
  local text=$(( $(sec .text) + $(sec .rodata) )) uninit
  # Everything in flash: the vector table and .data's initial values too.
  local flash=$(( text + $(sec .vector_table) + $(sec .data) ))
  uninit=$(sec .uninit)
  local ram=$(( $(sec .data) + $(sec .bss) + ${uninit:-0} ))
  echo "$name: flash code (.text+.rodata): $text bytes"
  echo "$name: flash in all (.vector_table+.text+.rodata+.data): $flash bytes (budget $flash_max)"
  echo "$name: static RAM (.data+.bss+.uninit): $ram bytes (budget $ram_max)"
  [ -n "$note" ] && echo "$name: $note"
  if (( flash > flash_max || ram > ram_max )); then
    echo "$name firmware budget exceeded" >&2
    return 1
  fi
}
check "telemetry gateway" "" target 65536 24576
check "store-and-forward gateway" "--features store-forward" target/store-forward 81920 32768
check "downlink gateway" "--features downlink" target/downlink 81920 32768 \
  "RAM with the stack: tests/tests/qemu_downlink.rs"
