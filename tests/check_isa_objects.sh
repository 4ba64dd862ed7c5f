#!/usr/bin/env bash
# Fails when a kernel file compiled for one instruction set (x86_avx2.cpp, x86_avx512vnni.cpp, x86_amx.cpp,
# ...) emits an inline function or template instance with external linkage outside its own namespace: the
# linker keeps one copy of each such function for the whole program, and if it kept this file's, code that
# runs on every CPU (std::string, QVL_CHECK's failure path, ...) would carry AVX-512 or AMX instructions and
# die with SIGILL on a CPU without them. Run by CTest (isa_objects_stay_apart) with qvl_engine's object files.
set -euo pipefail
bad=0
checked=0
for obj in "$@"; do
  case "$(basename "$obj")" in
    x86_avx2.cpp.o | x86_avxvnni.cpp.o | x86_avx512vnni.cpp.o | x86_avx512bf16.cpp.o | x86_amx.cpp.o | arm64_neon.cpp.o) ;;
    *) continue ;;
  esac
  symbols=$(nm -C "$obj") || { echo "nm cannot read $obj"; exit 1; }
  checked=$((checked + 1))
  # Weak code (W) is what the linker may take from any object; weak data (V: typeinfo, guard variables)
  # and unique globals (u) run nothing.
  hits=$(echo "$symbols" | awk '$2 == "W" { $1 = ""; $2 = ""; sub(/^  /, ""); print }' |
         grep -vE '\bqvl::(avx2|avxvnni|avx512vnni|avx512bf16|amx|neon)::' || true)
  if [ -n "$hits" ]; then
    echo "$(basename "$obj") emits functions another file could take, compiled for its instruction set:"
    echo "$hits" | head -20
    bad=1
  fi
done
if [ "$checked" = 0 ]; then
  echo "no kernel object among the $# files given: nothing was checked"
  exit 1
fi
[ "$bad" = 0 ] && echo "$checked kernel objects: none emits a function another file could take"
exit "$bad"
