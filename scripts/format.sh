#!/usr/bin/env bash
# Formats the project's C++ sources with clang-format and the tree's .clang-format.
#   bash scripts/format.sh           reformat them in place
#   bash scripts/format.sh --check   print the files that differ; exit 1 if any, 0 if none
# Sources: src, tests and samples (*.cpp, *.hpp), kernels/*.{h,cuh}, scripts/*.cu.
# The format is defined by clang-format 14 (Debian's); other versions may break lines
# differently. CLANG_FORMAT names another binary. Exit 2: usage error or clang-format failed.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=fix
case "${1:-}" in
  '') ;;
  --check) mode=check ;;
  -h|--help) sed -n '2,7s/^# \{0,1\}//p' "$0"; exit 0 ;;
  *) echo "format.sh: unknown argument '$1' (use --check or nothing)" >&2; exit 2 ;;
esac
[ $# -le 1 ] || { echo "format.sh: one argument at most" >&2; exit 2; }

cf="${CLANG_FORMAT:-clang-format}"
command -v "$cf" >/dev/null 2>&1 || { echo "format.sh: $cf not found (apt-get install clang-format)" >&2; exit 2; }
[ -f .clang-format ] || { echo "format.sh: no .clang-format at $(pwd)" >&2; exit 2; }
version="$("$cf" --version)"
if [[ "$version" != *"version 14."* ]]; then
  echo "format.sh: note: $version; the tree's format is defined by clang-format 14" >&2
fi

files=()
while IFS= read -r -d '' f; do files+=("$f"); done < <(
  { find src tests samples -type f \( -name '*.cpp' -o -name '*.hpp' \) -print0
    find kernels -maxdepth 1 -type f \( -name '*.h' -o -name '*.cuh' \) -print0
    find scripts -maxdepth 1 -type f -name '*.cu' -print0; } | sort -z)

if [ "$mode" = fix ]; then
  "$cf" --style=file -i "${files[@]}" || { echo "format.sh: clang-format failed" >&2; exit 2; }
  echo "formatted ${#files[@]} files"
  exit 0
fi

tmp="$(mktemp)"
trap 'rm -f "$tmp"' EXIT
differ=0
for f in "${files[@]}"; do
  "$cf" --style=file "$f" > "$tmp" || { echo "format.sh: clang-format failed on $f" >&2; exit 2; }
  if ! cmp -s "$tmp" "$f"; then
    echo "$f"
    differ=$((differ + 1))
  fi
done
if [ "$differ" -ne 0 ]; then
  echo "format.sh: $differ of ${#files[@]} files differ from the format (bash scripts/format.sh fixes them)" >&2
  exit 1
fi
echo "format.sh: all ${#files[@]} files match the format" >&2
