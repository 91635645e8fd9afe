# DataLoader worker killed by a bus error (/dev/shm full): HOST010
# A real excerpt from the corpus (test/fixtures/logs-real/failures/HOST010-stcn-dataloader-bus-error.log).
cp "$MLD_SOURCE_DIR/test/fixtures/logs-real/failures/HOST010-stcn-dataloader-bus-error.log" "$T/job.log"
