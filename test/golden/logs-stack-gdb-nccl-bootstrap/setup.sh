# gdb thread backtrace of a rank waiting in NCCL's bootstrap: DIST019
# A real excerpt from the corpus (test/fixtures/logs-real/failures/DIST019-ddp-nccl-bootstrap-gdb.log).
cp "$MLD_SOURCE_DIR/test/fixtures/logs-real/failures/DIST019-ddp-nccl-bootstrap-gdb.log" "$T/job.log"
