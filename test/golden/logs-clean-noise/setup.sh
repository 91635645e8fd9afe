# A healthy job: thousands of lines of NCCL INFO, progress bars, warnings and
# extension loading, none of them a problem. Nothing may be reported.
/usr/bin/python3 "$LIB/make_log.py" "$T/healthy.log" --lines 6000 --seed 11 --ranks 4
