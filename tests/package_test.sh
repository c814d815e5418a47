#!/bin/sh
# package_test.sh: kvactor as an outside project sees it. Configures, builds
# and runs examples/embed (a) against the build tree (kvactor_DIR) and (b)
# against an install prefix made by `cmake --install` (CMAKE_PREFIX_PATH),
# checking each time that find_package found the intended copy.
#
#   package_test.sh SOURCE_DIR BINARY_DIR [CMAKE] [CXX_COMPILER]
set -eu

src=$1
bin=$2
cmake=${3:-cmake}
cxx=${4:-}

work=$(mktemp -d "${TMPDIR:-/tmp}/kvactor_package.XXXXXX")
trap 'rm -rf "$work"' EXIT
trap 'exit 1' INT TERM

compiler_arg=""
if [ -n "$cxx" ]; then
  compiler_arg="-DCMAKE_CXX_COMPILER=$cxx"
fi

# Where the configured embed project found kvactor (the cache entry's type
# is PATH when find_package searched, UNINITIALIZED when given with -D).
found_dir() {
  found=$(sed -n 's/^kvactor_DIR:[A-Z]*=//p' "$1/CMakeCache.txt")
  if [ -z "$found" ] || [ ! -d "$found" ]; then
    echo "package_test: no kvactor_DIR in $1/CMakeCache.txt" >&2
    exit 1
  fi
  (cd "$found" && pwd -P)
}

# Configures, builds and runs embed in $1 with the remaining arguments.
build_and_run() {
  dir=$1
  shift
  "$cmake" -S "$src/examples/embed" -B "$dir" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_FIND_PACKAGE_NO_PACKAGE_REGISTRY=ON $compiler_arg "$@"
  "$cmake" --build "$dir" -j2
  "$dir/embed"
}

echo "== (a) against the build tree $bin"
build_and_run "$work/tree" -Dkvactor_DIR="$bin"
found=$(found_dir "$work/tree")
if [ "$found" != "$(cd "$bin" && pwd -P)" ]; then
  echo "package_test: (a) found kvactor in '$found', not the build tree" >&2
  exit 1
fi

echo "== (b) against an install prefix"
"$cmake" --install "$bin" --prefix "$work/prefix"
build_and_run "$work/installed" -DCMAKE_PREFIX_PATH="$work/prefix"
found=$(found_dir "$work/installed")
case "$found" in
  "$(cd "$work/prefix" && pwd -P)"/*) ;;
  *)
    echo "package_test: (b) found kvactor in '$found', not the prefix" >&2
    exit 1
    ;;
esac
# The installed embed must not reach into the source or build tree.
if grep -q -e "$src" -e "$bin" "$work/installed/CMakeFiles/embed.dir/flags.make"; then
  echo "package_test: (b) compiles against the source or build tree:" >&2
  cat "$work/installed/CMakeFiles/embed.dir/flags.make" >&2
  exit 1
fi
echo "package_test: ok"
