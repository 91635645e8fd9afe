# Three saved check reports of three nodes (lib/three-nodes.sh): node-b has
# another driver, node-c an HCA port down and another NCCL_IB_HCA.
. "$LIB/three-nodes.sh"
NCCL_IB_HCA=mlx5 "$MLDOCTOR" check --json --root "$T/node-a" > "$T/node-a.json" || true
NCCL_IB_HCA=mlx5 "$MLDOCTOR" check --json --root "$T/node-b" > "$T/node-b.json" || true
NCCL_IB_HCA=mlx5_0 "$MLDOCTOR" check --json --root "$T/node-c" > "$T/node-c.json" || true
