#!/usr/bin/env bash
# Installs what sluice needs to build and test, idempotently: Debian packages (only the missing
# ones, so a second run costs a dpkg query), the npm packages of the test oracles (npm ci from
# the committed lock file, re-run only when the lock file changed) and llama.cpp's converter source,
# from which scripts/gguf-fixtures.sh makes the GGUF test fixtures (fetched once into a cache).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build pkg-config git clang libclang-rt-14-dev clang-format
  nlohmann-json3-dev libfmt-dev libcli11-dev libpcre2-dev libutf8proc-dev libxxhash-dev
  libgtest-dev libgmock-dev libbenchmark-dev liburing-dev libedit-dev libboost-dev libssl-dev libcurl4-openssl-dev chromium
  nodejs
  python3-numpy  # the GGUF fixtures' generators (scripts/gguf-fixtures.sh) run on /usr/bin/python3
  zsh fish mandoc  # the generated completions and man page are checked by the shells and mandoc's linter
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
sudo_cmd=()
[[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if ! command -v npm >/dev/null; then
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends npm
fi

# npm oracles (tokenizer, chat template, OpenAI client): reinstall only when the lock changed.
stamp=node_modules/.sluice-lock-stamp
if [[ ! -f $stamp ]] || ! cmp -s package-lock.json "$stamp"; then
  echo "install-deps: npm ci"
  npm ci --no-audit --no-fund --loglevel=error
  cp package-lock.json "$stamp"
fi

# llama.cpp's converter (conversion/, gguf-py/) for the GGUF test fixtures, from the npm package
# node-llama-cpp: a no-op once cached.
scripts/gguf-fixtures.sh --fetch
