#!/usr/bin/env bash
# The main job on the built-in default model (models/tiny-next, a small trained Qwen3-Next-
# architecture MoE): pack it into sluice's streaming layout once, then complete a Python function
# with the routed experts streamed from disk through a deliberately small expert cache (86M leaves
# 147 of the 512 expert slots after dense weights, state, scratch, runtime and a prefix cache of a sixteenth
# of what those leave), and print
# the streaming statistics.
set -euo pipefail
cd "$(dirname "$0")/.."
sluice=${1:-build/bin/sluice}
model=${2:-models/tiny-next}
packed=build/models/$(basename "$model")-packed

if [[ ! -f $packed/manifest.json ]]; then
  echo "== packing $model → $packed (one-time)"
  "$sluice" pack "$model" "$packed"
fi

echo "== sluice info"
"$sluice" info "$packed" --memory 86M --ctx-size 1024 --no-measure

prompt=$'import os\n\n\ndef find_python_files(root):\n    """Return the paths of all Python files under root."""\n'
echo
echo "== sluice generate (an expert cache of about a third of the experts; every miss is an O_DIRECT read)"
printf '%s' "$prompt"
"$sluice" generate "$packed" -p "$prompt" -n 96 --temperature 0.6 --top-p 0.9 --repeat-penalty 1.1 --seed 7 \
  --memory 86M --ctx-size 1024
