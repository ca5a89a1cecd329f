#!/usr/bin/env bash
# Fails when the build could fetch anything at build time: every dependency
# comes from Debian packages installed by scripts/install-deps.sh. Looks at
# the CMake files, the Makefile, the Dockerfile's build stage and the build
# and CI scripts for FetchContent, ExternalProject, file(DOWNLOAD), git
# clone, curl, wget and module downloads by go/pip.
set -euo pipefail
cd "$(dirname "$0")/.."

files=$(git ls-files 'CMakeLists.txt' '*/CMakeLists.txt' '*.cmake' \
  'Makefile' '.ci/*' 'scripts/*' 'bench/run.sh' 'tests/helm/helmrender/*')
# This script names the patterns it looks for.
files=$(printf '%s\n' $files | grep -v '^scripts/check-no-fetch.sh$')

pattern='FetchContent|ExternalProject|file *\( *DOWNLOAD|git +clone|'
# curl and wget as commands (a URL or an option follows), not as the name of
# a Debian package: curl is a test peer, run against loopback.
pattern+='(curl|wget) +(-|"?https?:|"?ftp:)|go +(get|mod +download)|'
pattern+='pip3? +install'

if matches=$(grep -nE "$pattern" $files); then
  echo "check-no-fetch: the build must not download anything:" >&2
  echo "$matches" >&2
  exit 1
fi
echo "check-no-fetch: $(echo "$files" | wc -l) build files, no downloads"
