# Seed 003: torch set to one thread, then numba's first parallel call.
cat > "$T/train.py" <<'PY'
import torch
torch.set_num_threads(1)
print("torch threads before numba:", torch.get_num_threads())
import numba
print("numba threads:", numba.get_num_threads())
print("torch threads after numba:", torch.get_num_threads())
PY
