# DistBackendError 'invalid usage' around NCCL's 'Duplicate GPU detected': NCCL010 leads
# A real excerpt from the corpus (test/fixtures/logs-real/failures/NCCL010-megatron-barrier-duplicate-gpu.log).
cp "$MLD_SOURCE_DIR/test/fixtures/logs-real/failures/NCCL010-megatron-barrier-duplicate-gpu.log" "$T/job.log"
