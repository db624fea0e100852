#!/usr/bin/env bash
# Builds the no-allocator telemetry gateway firmware for thumbv7em-none-eabihf, prints its
# section sizes (.text/.rodata/.data/.bss) and fails when the budget is exceeded: at most
# 64 KiB of flash code (.text + .rodata) and 24 KiB of static RAM (.data + .bss, socket and
# frame buffers included). Needs the rustup target and llvm-size or binutils' `size`.
set -euo pipefail
cd "$(dirname "$0")"
cargo build --release --locked
elf=target/thumbv7em-none-eabihf/release/rmq-firmware
echo "telemetry gateway firmware: $elf"
if command -v llvm-size >/dev/null; then sizes=$(llvm-size -A "$elf"); else sizes=$(size -A "$elf"); fi
echo "$sizes" | grep -E '^(section|\.text|\.rodata|\.data|\.bss|\.uninit|Total)'
sec() { echo "$sizes" | awk -v s="$1" '$1 == s { print $2 }'; }
text=$(( $(sec .text) + $(sec .rodata) ))
uninit=$(sec .uninit)
ram=$(( $(sec .data) + $(sec .bss) + ${uninit:-0} ))
echo "flash code (.text+.rodata): $text bytes (budget 65536)"
echo "static RAM (.data+.bss+.uninit): $ram bytes (budget 24576)"
if (( text > 65536 || ram > 24576 )); then
  echo "firmware budget exceeded" >&2
  exit 1
fi
