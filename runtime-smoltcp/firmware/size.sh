#!/usr/bin/env bash
# Builds the no-allocator firmware link probe for thumbv7em-none-eabihf and prints its section
# sizes (.text/.rodata/.data/.bss). Needs the rustup target and binutils' `size` (any arch: it
# reads ELF headers) or llvm-size.
set -euo pipefail
cd "$(dirname "$0")"
cargo build --release --locked
elf=target/thumbv7em-none-eabihf/release/rmq-firmware
echo "firmware link probe: $elf"
if command -v llvm-size >/dev/null; then llvm-size -A "$elf"; else size -A "$elf"; fi | grep -E '^(section|\.text|\.rodata|\.data|\.bss|\.uninit|Total)' 
