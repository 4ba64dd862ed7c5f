#!/usr/bin/env bash
# Fails when a kernel file compiled for one instruction set (x86_avx2.cpp, x86_avx512vnni.cpp, x86_amx.cpp,
# ...) emits an inline function or template instance with external linkage outside its own namespace: the
# linker keeps one copy of each such symbol for the whole program, and if it kept this file's, code that
# runs on every CPU (std::string, std::vector, ...) would carry AVX-512 or AMX instructions and die with
# SIGILL on a CPU without them. Run by CTest (isa_objects_stay_apart) with qvl_core's object files.
set -euo pipefail
bad=0
for obj in "$@"; do
  case "$(basename "$obj")" in
    x86_avx2.cpp.o | x86_avxvnni.cpp.o | x86_avx512vnni.cpp.o | x86_amx.cpp.o | arm64_neon.cpp.o) ;;
    *) continue ;;
  esac
  # Weak (W, V) and unique (u) symbols are the ones the linker may pick from any object.
  hits=$(nm -C "$obj" | awk '$2 ~ /^[WVu]$/ { $1 = ""; $2 = ""; sub(/^  /, ""); print }' |
         grep -vE '^(DW\.ref\.__gxx_personality_v0|.*\bqvl::(avx2|avxvnni|avx512vnni|amx|neon)::.*)$' || true)
  if [ -n "$hits" ]; then
    echo "$(basename "$obj") emits shared symbols compiled for its instruction set:"
    echo "$hits" | head -20
    bad=1
  fi
done
[ "$bad" = 0 ] && echo "no instruction-set file emits a symbol another file could take"
exit "$bad"
