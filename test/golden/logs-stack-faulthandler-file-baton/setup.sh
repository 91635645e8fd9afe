# faulthandler's dump_traceback_later output of a test hung in FileBaton.wait(): JIT023
# A real excerpt from the corpus (test/fixtures/logs-real/failures/JIT023-openequivariance-faulthandler-file-baton.log).
cp "$MLD_SOURCE_DIR/test/fixtures/logs-real/failures/JIT023-openequivariance-faulthandler-file-baton.log" "$T/job.log"
