#!/bin/bash
# The container's entrypoint (deploy/container/Dockerfile).
#   qvl-entrypoint [serve] [options]   `qvl serve` with the options and QVL_* variables (docs/DEPLOY.md)
#   qvl-entrypoint healthcheck [PATH]  exit 0 when GET PATH (default /health) on the container's port is 200
#   qvl-entrypoint COMMAND ...         any other qvl command (pull, run, bench, ...)
# Inside the container qvl listens on 0.0.0.0 (reachable through a published port) only when asked: an API
# key (QVL_API_KEY or --api-key), QVL_LISTEN_ALL=1, or an explicit QVL_HOST / --host. Otherwise 127.0.0.1, and
# it says so. Without --model/--demo (or QVL_MODEL/QVL_DEMO) it serves Qwen/Qwen3-VL-2B-Instruct, downloaded
# on first start into $HF_HOME (a volume).
set -euo pipefail
qvl=${QVL_BINARY:-/usr/local/bin/qvl}

if [ "${1:-}" = healthcheck ]; then
  path=${2:-/health}
  exec 3<>"/dev/tcp/127.0.0.1/${QVL_PORT:-8080}" || exit 1
  printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' "$path" >&3
  IFS= read -r -t 5 status <&3 || exit 1
  case "$status" in
    "HTTP/1."?" 200 "*) exit 0 ;;
    *) echo "qvl-entrypoint: GET $path: ${status%$'\r'}" >&2; exit 1 ;;
  esac
fi

if [ $# -eq 0 ] || [ "${1#-}" != "$1" ]; then set -- serve "$@"; fi
if [ "$1" != serve ]; then exec "$qvl" "$@"; fi

has_arg() {  # has_arg NAME... : one of the options is among the arguments
  local a n
  for a in "${args[@]}"; do
    for n in "$@"; do
      case "$a" in "$n" | "$n="*) return 0 ;; esac
    done
  done
  return 1
}
args=("${@:2}")
if [ -z "${QVL_HOST:-}" ] && ! has_arg --host; then
  if [ -n "${QVL_API_KEY:-}" ] || has_arg --api-key || [ "${QVL_LISTEN_ALL:-0}" = 1 ]; then
    export QVL_HOST=0.0.0.0
  else
    export QVL_HOST=127.0.0.1
    echo "qvl-entrypoint: listening on 127.0.0.1 inside the container, which a published port does not reach;" \
         "set QVL_API_KEY=... (clients then send 'Authorization: Bearer ...') or QVL_LISTEN_ALL=1 to listen on 0.0.0.0" >&2
  fi
fi
if [ -z "${QVL_MODEL:-}" ] && [ -z "${QVL_DEMO:-}" ] && ! has_arg --model -m --demo; then
  args=(--model Qwen/Qwen3-VL-2B-Instruct "${args[@]}")
fi
exec "$qvl" serve "${args[@]}"
