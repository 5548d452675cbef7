#!/usr/bin/env bash
# Prints one Markdown table row per fuzz log: executions, seconds, exec/s, coverage, corpus, peak RSS, findings.
# Usage: fuzz/figures.sh fuzz/logs/*.log   (the logs run.sh writes; see README.md)

for log in "$@"; do
  t=$(basename "$log" .log)
  execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | grep -o '[0-9]*$')
  secs=$(grep -o 'Done [0-9]* runs in [0-9]* second' "$log" | grep -o 'in [0-9]*' | grep -o '[0-9]*')
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$')
  done_line=$(grep 'DONE' "$log" | tail -1)
  cov=$(echo "$done_line" | grep -o 'cov: [0-9]*' | grep -o '[0-9]*')
  ft=$(echo "$done_line" | grep -o 'ft: [0-9]*' | grep -o '[0-9]*')
  corp=$(echo "$done_line" | grep -o 'corp: [0-9]*/[0-9a-zA-Z]*' | cut -d' ' -f2)
  rss=$(grep -o 'stat::peak_rss_mb: *[0-9]*' "$log" | grep -o '[0-9]*$')
  finds=$(grep -cE '^==[0-9]+== ERROR|panicked at|deadly signal|ERROR: libFuzzer' "$log")
  printf '| `%s` | %s | %s | %s | %s | %s | %s | %s MB | %s |\n' "$t" "$execs" "$secs" "$rate" "$cov" "$ft" "$corp" "$rss" "$finds"
done
