# DistBackendError on rank 8 (its store->get of NCCL's unique id got
# "Connection reset by peer") after rank 0 died of CUDA out of memory: the
# envelope joins rank 0's cause. Both parts are real excerpts from the corpus
# (test/fixtures/logs-real/failures/), rank 0's given the launcher's prefix.
F="$MLD_SOURCE_DIR/test/fixtures/logs-real/failures"
{
  grep -h "CUDA out of memory" "$F/CUDA013-ipassr-torch20-reserved-wording.log" | sed 's/^/[rank0]: /'
  cat "$F/DIST022-multinode-allreduce-uniqueid-connection-reset.log"
} > "$T/job.log"
