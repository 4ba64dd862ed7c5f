#!/usr/bin/env bash
# Fails when a tracked file names a path outside the repository (../shared, the build machine's folders) or
# an absolute path of one machine: a clone anywhere else would break. Run by CTest (repository_stands_alone).
# deploy/ and docs/DEPLOY.md are exempt: their paths are those of the machines and images deployed to
# (/home/qvl in the image, /srv/models on a host), never read by the build or the tests here.
set -euo pipefail
cd "$(dirname "$0")/.."
pattern='\.\./shared|(^|[^A-Za-z0-9_.~${}-])/(work|home|root|tmp|mnt|srv|Users)/'
if [ -d .git ] || git rev-parse --git-dir >/dev/null 2>&1; then
  hits=$(git grep -nIE "$pattern" -- . ':!tests/check_repo_paths.sh' ':!deploy/' ':!docs/DEPLOY.md' || true)
else
  hits=$(grep -rnIE "$pattern" --exclude-dir=build* --exclude-dir=.git --exclude-dir=deploy --exclude=check_repo_paths.sh \
           --exclude=DEPLOY.md . || true)
fi
if [ -n "$hits" ]; then
  echo "paths outside the repository or absolute paths (use paths relative to the repository, \$TMPDIR or out/):"
  echo "$hits" | cut -c1-200
  exit 1
fi
echo "no path outside the repository"
