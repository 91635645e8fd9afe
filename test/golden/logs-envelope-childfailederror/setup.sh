# torchrun's ChildFailedError around a worker killed with SIGKILL (exitcode -9): HOST011 leads
# A real excerpt from the corpus (test/fixtures/logs-real/failures/HOST011-robomamba-torchrun-exitcode-9.log).
cp "$MLD_SOURCE_DIR/test/fixtures/logs-real/failures/HOST011-robomamba-torchrun-exitcode-9.log" "$T/job.log"
