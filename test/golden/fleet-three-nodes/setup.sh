# Three emulated nodes (lib/three-nodes.sh): node-b has another driver,
# node-c an HCA port down.
. "$LIB/three-nodes.sh"
