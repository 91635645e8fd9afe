# Seed 002: a DeepSpeed job whose log ends while every rank waits for the
# extension build lock (a stale lock file): the stall is the finding.
/usr/bin/python3 "$LIB/make_log.py" "$T/stalled.log" --lines 2004 --seed 2 2001:"$CASE/incident.txt"
