# Seed 001: an import fails on static TLS; the log was rotated and gzipped.
/usr/bin/python3 "$LIB/make_log.py" "$T/job.log.1.gz" --gzip --lines 2500 --seed 1 1777:"$CASE/incident.txt"
