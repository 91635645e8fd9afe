# py-spy dump of a job hung in torch's FileBaton.wait(): JIT023 names the wait
# A real excerpt from the corpus (test/fixtures/logs-real/failures/JIT023-deepspeedchat-pyspy-file-baton.log).
cp "$MLD_SOURCE_DIR/test/fixtures/logs-real/failures/JIT023-deepspeedchat-pyspy-file-baton.log" "$T/job.log"
