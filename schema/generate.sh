#!/usr/bin/env bash
# Regenerates the committed flatbuffers Python code (schema/fb/) from the .fbs files.
# Needs flatc (Debian: flatbuffers-compiler).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/fb}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
flatc --python --gen-object-api -o "$tmp" "$here/model.fbs" "$here/ops.fbs"
rm -rf "$out"
mv "$tmp/lite/schema/fb" "$out"
