# Illegal instruction on import torch: HOST013
# A real excerpt from the corpus (test/fixtures/logs-real/failures/HOST013-pytorch-37577-sigill-libtorch-cpu-import.log).
cp "$MLD_SOURCE_DIR/test/fixtures/logs-real/failures/HOST013-pytorch-37577-sigill-libtorch-cpu-import.log" "$T/job.log"
