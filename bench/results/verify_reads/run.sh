#!/bin/bash
S=/work/main/build/bin/sluice
for i in 1 2 3; do
  for v in off on; do
    flag=--no-verify-reads; [ $v = on ] && flag=--verify-reads
    sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null
    $S bench /tmp/m80x4 --memory 1500M $flag --prompt-tokens 32 --gen-tokens 24 --reps 2 --warmup 1 --json /tmp/vr/$v$i.json > /tmp/vr/$v$i.txt 2>&1
  done
done
echo done > /tmp/vr/done
