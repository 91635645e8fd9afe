# a bare 'Killed' line from the shell: HOST011 (the OOM killer or a memory limit)
# A real excerpt from the corpus (test/fixtures/logs-real/failures/HOST011-gmtracker-train-bare-killed.log).
cp "$MLD_SOURCE_DIR/test/fixtures/logs-real/failures/HOST011-gmtracker-train-bare-killed.log" "$T/job.log"
