#!/bin/bash
A=/work/main/build/bin/sluice
B=/tmp/build-b/bin/sluice
for i in 1 2; do
  for v in a b; do
    bin=$A; [ $v = b ] && bin=$B
    sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null
    $bin bench /tmp/m80x4 --memory 8G --prompt-tokens 64 --gen-tokens 24 --reps 3 --warmup 1 --json /tmp/cpuab/$v$i.json > /tmp/cpuab/$v$i.txt 2>&1
  done
done
for n in 1 4; do
  $A bench /tmp/m80x4 --memory 1500M --sequences $n --prompt-tokens 32 --gen-tokens 8 --reps 2 --json /tmp/cpuab/batch_streamed_n$n.json > /tmp/cpuab/batch_streamed_n$n.txt 2>&1
done
# 8 sessions' scratch does not fit 1500M: the budget is raised for n = 8
$A bench /tmp/m80x4 --memory 2600M --sequences 8 --prompt-tokens 32 --gen-tokens 8 --reps 2 --json /tmp/cpuab/batch_streamed_n8.json > /tmp/cpuab/batch_streamed_n8.txt 2>&1
$A bench /tmp/m80x4 --memory 8G --sequences 4 --prompt-tokens 32 --gen-tokens 16 --reps 2 --warmup 1 --json /tmp/cpuab/batch_ram_n4.json > /tmp/cpuab/batch_ram_n4.txt 2>&1
echo done > /tmp/cpuab/done
