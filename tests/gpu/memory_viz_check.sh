#!/usr/bin/env bash
# `vramtrace export --format memory-viz` checked by PyTorch's own reader: each snapshot pickle
# given is opened by the subcommands of `python -m torch.cuda._memory_viz` of the PyTorch installed
# here that need no network (stats, trace, trace_plot, segment_plot; segments and memory download
# flamegraph.pl). A subcommand that raises, exits non-zero or writes nothing fails the check.
# Usage: tests/gpu/memory_viz_check.sh OUTDIR SNAPSHOT.pickle...     Exit 0 when all held.
set -uo pipefail
out=$1; shift
mkdir -p "$out"
fail=0
python3 -c "import torch; print('PyTorch', torch.__version__)"
for snap in "$@"; do
  name=$(basename "$snap" .pickle)
  for sub in stats trace; do
    if python3 -m torch.cuda._memory_viz "$sub" "$snap" >"$out/$name.$sub.txt" 2>&1 && [[ -s $out/$name.$sub.txt ]]; then
      echo "ok    $name $sub ($(wc -l <"$out/$name.$sub.txt") lines)"
    else
      echo "FAIL  $name $sub"; tail -5 "$out/$name.$sub.txt"; fail=1
    fi
  done
  for sub in trace_plot segment_plot; do
    if python3 -m torch.cuda._memory_viz "$sub" "$snap" -o "$out/$name.$sub.html" >"$out/$name.$sub.log" 2>&1 \
       && [[ -s $out/$name.$sub.html ]]; then
      echo "ok    $name $sub ($(wc -c <"$out/$name.$sub.html") bytes)"
    else
      echo "FAIL  $name $sub"; tail -5 "$out/$name.$sub.log"; fail=1
    fi
  done
done
exit $fail
