# NCCL 'remote process exited or there was a network error' around an IB completion error: NCCL021 leads
# A real excerpt from the corpus (test/fixtures/logs-real/failures/NCCL021-alpaca-ib-completion-error-12.log).
cp "$MLD_SOURCE_DIR/test/fixtures/logs-real/failures/NCCL021-alpaca-ib-completion-error-12.log" "$T/job.log"
