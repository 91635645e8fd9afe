# Seed 004: eight ranks on four GPUs (two ranks per GPU) warn that the
# barrier's GPU is a guess, then the first collective times out on two ranks.
/usr/bin/python3 "$LIB/make_log.py" "$T/ranks.log" --lines 5000 --seed 4 --ranks 8 \
  1500:"$CASE/incident-barrier.txt" 4200:"$CASE/incident-timeout.txt"
