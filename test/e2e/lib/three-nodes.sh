# Sourced by golden cases: three emulated nodes $T/node-{a,b,c}, copies of
# the 8-GPU fixture host with their own hostnames; node-b has another NVIDIA
# driver, node-c an HCA port (mlx5_1 port 1) down.
base="$MLD_SOURCE_DIR/test/fixtures/hosts/gpu-8x-two-socket"
for n in node-a node-b node-c; do
  cp -a "$base" "$T/$n"
  mkdir -p "$T/$n/proc/sys/kernel"
  echo "$n" > "$T/$n/proc/sys/kernel/hostname"
done
sed -i 's/535\.104\.05/550.54.15/' "$T/node-b/proc/driver/nvidia/version"
state=$(find "$T/node-c/sys/devices" -path '*infiniband/mlx5_1/ports/1/state')
echo "1: DOWN" > "$state"
