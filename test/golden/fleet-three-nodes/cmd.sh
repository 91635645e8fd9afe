# Six ranks, two per emulated node; the ranks of node-c were given another
# NCCL_IB_HCA. Open MPI as root on a test machine needs the two ALLOW
# variables; shared memory and loopback only.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader
unset NCCL_IB_HCA OMPI_COMM_WORLD_SIZE
cd "$T"
mpirun --oversubscribe -np 2 env NCCL_IB_HCA=mlx5 "$MLDOCTOR" fleet --root node-a : -np 2 env NCCL_IB_HCA=mlx5 "$MLDOCTOR" fleet --root node-b : -np 2 env NCCL_IB_HCA=mlx5_0 "$MLDOCTOR" fleet --root node-c
