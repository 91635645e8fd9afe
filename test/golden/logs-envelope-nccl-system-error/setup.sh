# NCCL 'unhandled system error' around a failed connect: NCCL017 leads
# A real excerpt from the corpus (test/fixtures/logs-real/failures/NCCL017-transformer-ddp-no-route-to-host.log).
cp "$MLD_SOURCE_DIR/test/fixtures/logs-real/failures/NCCL017-transformer-ddp-no-route-to-host.log" "$T/job.log"
