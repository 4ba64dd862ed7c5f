#!/usr/bin/env bash
# Fails when a source file under src/ includes a header of a folder above its own (README.md, Layout): each
# folder is one layer and dependencies point down. Run by CTest (layers_point_down) with the source tree.
set -euo pipefail
src="${1:?usage: check_layers.sh SRC_DIR}"
# The folders each folder may include from (besides itself).
declare -A allowed=(
  [util]=""
  [tensor]="util"
  [kernels]="tensor util"
  [io]="tensor util"
  [tokenizer]="util"
  [chat]="tokenizer util"
  [model]="chat io kernels tensor tokenizer util"
  [hub]="model chat io kernels tensor tokenizer util"
  [engine]="model chat io kernels tensor tokenizer util"
  [server]="engine model chat io kernels tensor tokenizer util"
  [cli]="server engine hub model chat io kernels tensor tokenizer util"
)
bad=0
checked=0
for dir in "$src"/*/; do
  layer=$(basename "$dir")
  if [ -z "${allowed[$layer]+set}" ]; then
    echo "src/$layer/: a folder this check does not know; give it its place in tests/check_layers.sh and README.md"
    bad=1
    continue
  fi
  while IFS= read -r line; do
    file=${line%%:*}
    target=$(echo "$line" | sed -E 's/.*#include "([a-z_0-9]+)\/.*/\1/')
    [ "$target" = "$layer" ] && continue
    case " ${allowed[$layer]} " in
      *" $target "*) ;;
      *) echo "${file#"$src"/}: includes $target/, above $layer/ (allowed: ${allowed[$layer]:-nothing})"; bad=1 ;;
    esac
  done < <(grep -rHE '^#include "[a-z_0-9]+/' "$dir" || true)
  checked=$((checked + 1))
done
[ "$bad" = 0 ] && echo "$checked folders: every include points down"
exit "$bad"
