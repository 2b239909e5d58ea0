#!/usr/bin/env bash
# Would the library link without CUDA? A CUDA build (this one) compiles the
# port's stand-ins (backend/cuda/no_cuda*.cpp) without linking them. Every
# other object is compiled alike in both builds (no source asks whether
# CUDA is on), so a build without CUDA is these objects minus the CUDA-only
# ones plus the stand-ins, and it links when:
#   - each symbol that the objects it keeps use and that only the CUDA-only
#     objects define is defined by a stand-in (else: undefined reference);
#   - no stand-in defines, strongly, what a kept object defines (else:
#     multiple definition).
# Usage: no_cuda_link.sh NM CUDA_ONLY_REGEX "OBJECTS" "STAND_IN_OBJECTS"
# (the lists ';'-separated, as CMake's $<TARGET_OBJECTS> gives them).
set -euo pipefail
nm_tool=$1
cuda_only=$2
IFS=';' read -ra objects <<< "$3"
IFS=';' read -ra standins <<< "$4"

kept=()
port=()
for o in "${objects[@]}"; do
  if [[ $o =~ $cuda_only ]]; then port+=("$o"); else kept+=("$o"); fi
done
if [ ${#port[@]} -eq 0 ] || [ ${#standins[@]} -eq 0 ] || [ ${#kept[@]} -eq 0 ]; then
  echo "no_cuda_link: expected CUDA-only objects, stand-ins and other objects; got ${#port[@]}, ${#standins[@]}, ${#kept[@]}" >&2
  exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# nm over several files prints "file:" headers and "address type name" rows.
defined() { "$nm_tool" --defined-only -g "$@" | awk 'NF == 3 { print $3 }' | sort -u; }
strong() { "$nm_tool" --defined-only -g "$@" | awk 'NF == 3 && $2 ~ /^[TDBR]$/ { print $3 }' | sort -u; }
undefined() { "$nm_tool" -u "$@" | awk '$1 == "U" { print $2 }' | sort -u; }

undefined "${kept[@]}" "${standins[@]}" > "$tmp/needed"
defined "${kept[@]}" "${standins[@]}" > "$tmp/provided"
defined "${port[@]}" > "$tmp/port"
comm -12 "$tmp/needed" "$tmp/port" | comm -23 - "$tmp/provided" > "$tmp/missing"
strong "${kept[@]}" > "$tmp/kept_strong"
strong "${standins[@]}" | comm -12 - "$tmp/kept_strong" > "$tmp/twice"

demangle() { if command -v c++filt > /dev/null; then c++filt; else cat; fi; }
status=0
if [ -s "$tmp/missing" ]; then
  echo "a build without CUDA would not link: these are defined only by the CUDA objects, and no stand-in (src/backend/cuda/no_cuda*.cpp) defines them:"
  demangle < "$tmp/missing" | sed 's/^/  /'
  status=1
fi
if [ -s "$tmp/twice" ]; then
  echo "a build without CUDA would not link: both a stand-in and another object define:"
  demangle < "$tmp/twice" | sed 's/^/  /'
  status=1
fi
if [ $status -eq 0 ]; then
  echo "ok: ${#kept[@]} objects and ${#standins[@]} stand-ins link without the ${#port[@]} CUDA-only objects" \
       "($(wc -l < "$tmp/needed") symbols used, $(comm -12 "$tmp/needed" "$tmp/port" | wc -l) of them the port's)"
fi
exit $status
