# NCCL 'internal error' around 'Bootstrap : no socket interface found': NCCL016 leads
# A real excerpt from the corpus (test/fixtures/logs-real/failures/NCCL016-mambatree-barrier-no-socket-interface.log).
cp "$MLD_SOURCE_DIR/test/fixtures/logs-real/failures/NCCL016-mambatree-barrier-no-socket-interface.log" "$T/job.log"
