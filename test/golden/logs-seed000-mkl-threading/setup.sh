# A torchrun job whose workers die in mkl-service's threading-layer check
# (seed 000), after torchrun's OMP_NUM_THREADS notice; the error comes from
# two workers.
/usr/bin/python3 "$LIB/make_log.py" "$T/train.log" --lines 3000 --seed 7 \
  5:"$CASE/incident.txt" 2210:"$CASE/incident2.txt" 2260:"$CASE/incident2.txt"
