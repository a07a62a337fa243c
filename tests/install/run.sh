#!/usr/bin/env bash
# The installed package, both ways (issue 23): `cmake --install BUILD --prefix P` into a scratch
# prefix, then tests/install/consumer built against it with find_package(sluice) and with
# pkg-config, each run on the default model and compared with `sluice generate`; the installed
# man page and completions are there; `cpack -G DEB` makes a .deb holding the same tree.
# Usage: tests/install/run.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
BUILD=$(cd "$1" && pwd)
SRC=$(cd "$2" && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "[install] FAILED: $*"; exit 1; }
MODEL=$SRC/models/tiny-next
PROMPT="Once upon a time"

cmake --install "$BUILD" --prefix "$TMP/prefix" >"$TMP/install.log" || { cat "$TMP/install.log"; fail "cmake --install"; }
P=$TMP/prefix
for f in bin/sluice include/sluice/engine.h include/sluice/session.h share/man/man1/sluice.1 \
    share/bash-completion/completions/sluice share/zsh/vendor-completions/_sluice \
    share/fish/vendor_completions.d/sluice.fish; do
    [[ -e $P/$f ]] || fail "cmake --install did not install $f"
done
LIB=$(find "$P" -name libsluice.a | head -n 1)
[[ -n $LIB ]] || fail "no libsluice.a installed"
PC=$(find "$P" -name sluice.pc | head -n 1)
CFG=$(find "$P" -name sluiceConfig.cmake | head -n 1)
[[ -n $PC && -n $CFG ]] || fail "no pkg-config file or CMake package installed"
[[ -z $(ls "$P/include" | grep -v '^sluice$') ]] || fail "headers outside include/sluice installed"
echo "[install] installed: $(cd "$P" && find . -type f | wc -l) files ($LIB, $PC, $CFG)"

want=$("$P/bin/sluice" generate "$MODEL" -p "$PROMPT" -n 8 --temperature 0 --quiet-stats -t 2 2>/dev/null) ||
    fail "the installed sluice does not run"
[[ -n $want ]] || fail "sluice generate wrote nothing to compare with"

gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
cmake -S "$SRC/tests/install/consumer" -B "$TMP/cmake-consumer" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$P" >"$TMP/consumer.log" 2>&1 || { cat "$TMP/consumer.log"; fail "find_package(sluice)"; }
cmake --build "$TMP/cmake-consumer" >>"$TMP/consumer.log" 2>&1 || { tail -n 30 "$TMP/consumer.log"; fail "building against sluice::sluice"; }
got=$("$TMP/cmake-consumer/consumer" "$MODEL" "$PROMPT") || fail "the CMake-built program failed"
[[ $got == "$want" ]] || fail "the CMake-built program wrote '$got', sluice generate '$want'"
echo "[install] find_package(sluice) → sluice::sluice: built and ran, the same text as sluice generate"

export PKG_CONFIG_PATH=$(dirname "$PC")
pkg-config --exists sluice || fail "pkg-config does not find sluice"
[[ $(pkg-config --modversion sluice) == "$("$P/bin/sluice" version --json | sed -n 's/.*"version": "\(.*\)".*/\1/p')" ]] ||
    fail "pkg-config's version is not the binary's"
# shellcheck disable=SC2046
c++ -O1 -o "$TMP/pc-consumer" "$SRC/tests/install/consumer/main.cpp" $(pkg-config --cflags --libs sluice) \
    >"$TMP/pc.log" 2>&1 || { tail -n 30 "$TMP/pc.log"; fail "building with pkg-config --cflags --libs sluice"; }
got=$("$TMP/pc-consumer" "$MODEL" "$PROMPT") || fail "the pkg-config-built program failed"
[[ $got == "$want" ]] || fail "the pkg-config-built program wrote '$got', sluice generate '$want'"
echo "[install] pkg-config sluice: built and ran, the same text"

(cd "$TMP" && cpack -G DEB --config "$BUILD/CPackConfig.cmake" >"$TMP/cpack.log" 2>&1) || { tail -n 20 "$TMP/cpack.log"; fail "cpack -G DEB"; }
DEB=$(find "$TMP" -maxdepth 1 -name 'sluice_*.deb' | head -n 1)
[[ -n $DEB ]] || fail "cpack made no .deb"
listing=$(dpkg-deb -c "$DEB")
for f in ./usr/bin/sluice ./usr/include/sluice/engine.h ./usr/share/man/man1/sluice.1 sluice.pc sluiceConfig.cmake libsluice.a; do
    grep -q -- "$f" <<<"$listing" || fail "the .deb lacks $f"
done
# Read whole, then matched: `dpkg-deb | grep -q` under pipefail fails whenever grep exits before dpkg-deb
# has written everything (SIGPIPE).
control=$(dpkg-deb -f "$DEB" Package Version Depends)
grep -q "^Package: sluice" <<<"$control" || fail "the .deb's control fields: $control"
echo "[install] $(basename "$DEB"): $(grep -c . <<<"$listing") entries, $(dpkg-deb -f "$DEB" Version)"
echo "[install] all checks passed"
