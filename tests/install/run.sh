#!/usr/bin/env bash
# The installed package (issue 23): `cmake --install BUILD --prefix P` into a scratch prefix, then
# tests/install/consumer built against it three ways — find_package(sluice) with libsluice.so
# (sluice::sluice) and with libsluice.a (sluice::sluice_static), and pkg-config — each run on the
# default model and compared with `sluice generate`; libsluice.so exports the public API and
# nothing else; the installed man page and completions are there; `cpack -G DEB` makes a .deb
# holding the same tree.
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
LIBDIR=$(dirname "$LIB")
SO=$LIBDIR/libsluice.so
[[ -L $SO ]] || fail "no libsluice.so link installed"
SONAME=$(objdump -p "$SO" | awk '$1 == "SONAME" { print $2 }')
[[ $SONAME =~ ^libsluice\.so\.[0-9]+\.[0-9]+$ && -L $LIBDIR/$SONAME && -f $(readlink -f "$SO") ]] ||
    fail "libsluice.so's soname '$SONAME' is not a link to the installed library"
# Exported: the classes and functions of include/sluice/ marked SLUICE_API, nothing else — no
# symbol of src/'s namespaces, no standard library or Boost instance, nothing of fmt or the CUDA
# runtime linked into it (cmake/libsluice.map).
exported=$(nm -D --defined-only --demangle "$SO" | cut -d' ' -f3-)
public='^(sluice::(Engine|Session|Tokenizer|IncrementalDetokenizer|ChatTemplate|GrammarBuilder|GrammarMatcher|TokenTrie|TokenConstraint|TextStream|Status|MemoryPlan)::|sluice::(plan_memory|compute_perplexity|error_code_name|cache_policy_name|parse_cache_policy|cuda_diagnostics_from_env|build_info|version_line)[[(]|(typeinfo|typeinfo name|vtable) for sluice::)'
stray=$(grep -Ev "$public" <<<"$exported" | head -n 5 || true)
[[ -z $stray ]] || fail "libsluice.so exports more than the public API, e.g.: $stray"
for sym in 'sluice::Engine::load(' 'sluice::Session::generate(' 'sluice::Tokenizer::encode(' \
    'sluice::ChatTemplate::render(' 'sluice::build_info()'; do
    grep -qF -- "$sym" <<<"$exported" || fail "libsluice.so does not export $sym"
done
echo "[install] libsluice.so ($SONAME): $(grep -c . <<<"$exported") symbols exported, all of the public API"
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
# consumer_with_cmake NAME STATIC: configure and build tests/install/consumer with find_package(sluice).
consumer_with_cmake() {
    local dir=$TMP/cmake-$1
    cmake -S "$SRC/tests/install/consumer" -B "$dir" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_PREFIX_PATH="$P" -DCONSUMER_STATIC="$2" >"$dir.log" 2>&1 || { cat "$dir.log"; fail "find_package(sluice) ($1)"; }
    cmake --build "$dir" >>"$dir.log" 2>&1 || { tail -n 30 "$dir.log"; fail "building against sluice ($1)"; }
    got=$("$dir/consumer" "$MODEL" "$PROMPT") || fail "the CMake-built program ($1) failed"
    [[ $got == "$want" ]] || fail "the CMake-built program ($1) wrote '$got', sluice generate '$want'"
}
consumer_with_cmake shared OFF
grep -qF "$SONAME" <<<"$(ldd "$TMP/cmake-shared/consumer")" ||
    fail "the program built against sluice::sluice does not load $SONAME: $(ldd "$TMP/cmake-shared/consumer")"
echo "[install] find_package(sluice) → sluice::sluice: built against $SONAME, ran, the same text as sluice generate"
consumer_with_cmake static ON
! grep -q libsluice <<<"$(ldd "$TMP/cmake-static/consumer")" || fail "sluice::sluice_static loads libsluice.so"
echo "[install] sluice::sluice_static: built against libsluice.a, ran, the same text"

export PKG_CONFIG_PATH=$(dirname "$PC")
pkg-config --exists sluice || fail "pkg-config does not find sluice"
[[ $(pkg-config --modversion sluice) == "$("$P/bin/sluice" version --json | sed -n 's/.*"version": "\(.*\)".*/\1/p')" ]] ||
    fail "pkg-config's version is not the binary's"
# shellcheck disable=SC2046
c++ -O1 -o "$TMP/pc-consumer" "$SRC/tests/install/consumer/main.cpp" $(pkg-config --cflags --libs sluice) \
    -Wl,-rpath,"$(pkg-config --variable=libdir sluice)" \
    >"$TMP/pc.log" 2>&1 || { tail -n 30 "$TMP/pc.log"; fail "building with pkg-config --cflags --libs sluice"; }
got=$("$TMP/pc-consumer" "$MODEL" "$PROMPT") || fail "the pkg-config-built program failed"
[[ $got == "$want" ]] || fail "the pkg-config-built program wrote '$got', sluice generate '$want'"
grep -qF "$SONAME" <<<"$(ldd "$TMP/pc-consumer")" || fail "the pkg-config-built program does not load $SONAME"
# What libsluice.a needs besides is for `pkg-config --static` only.
static_libs=$(pkg-config --static --libs sluice)
for l in -lfmt -lpcre2-8 -lxxhash; do
    grep -q -- "$l" <<<"$static_libs" || fail "pkg-config --static --libs sluice lacks $l: $static_libs"
    ! grep -q -- "$l" <<<"$(pkg-config --libs sluice)" || fail "pkg-config --libs sluice overlinks $l"
done
echo "[install] pkg-config sluice: built against $SONAME and ran, the same text; --static lists libsluice.a's own"

(cd "$TMP" && cpack -G DEB --config "$BUILD/CPackConfig.cmake" >"$TMP/cpack.log" 2>&1) || { tail -n 20 "$TMP/cpack.log"; fail "cpack -G DEB"; }
DEB=$(find "$TMP" -maxdepth 1 -name 'sluice_*.deb' | head -n 1)
[[ -n $DEB ]] || fail "cpack made no .deb"
listing=$(dpkg-deb -c "$DEB")
for f in ./usr/bin/sluice ./usr/include/sluice/engine.h ./usr/share/man/man1/sluice.1 sluice.pc sluiceConfig.cmake libsluice.a libsluice.so "$SONAME"; do
    grep -q -- "$f" <<<"$listing" || fail "the .deb lacks $f"
done
# Read whole, then matched: `dpkg-deb | grep -q` under pipefail fails whenever grep exits before dpkg-deb
# has written everything (SIGPIPE).
control=$(dpkg-deb -f "$DEB" Package Version Depends)
grep -q "^Package: sluice" <<<"$control" || fail "the .deb's control fields: $control"
mkdir "$TMP/control" && dpkg-deb -e "$DEB" "$TMP/control"
grep -q "^libsluice $(sed 's/^libsluice\.so\.//' <<<"$SONAME") sluice" "$TMP/control/shlibs" ||
    fail "the .deb's shlibs does not name $SONAME: $(cat "$TMP/control/shlibs" 2>&1)"
grep -qs ldconfig "$TMP/control/postinst" "$TMP/control/triggers" || fail "the .deb does not run ldconfig"
echo "[install] $(basename "$DEB"): $(grep -c . <<<"$listing") entries, $(dpkg-deb -f "$DEB" Version)"
echo "[install] all checks passed"
