# Seed 001 in miniature: eight libraries with 400 bytes of initial-exec TLS
# each, dlopen()ed one after another by a program; the fifth no longer fits.
for i in 1 2 3 4 5 6 7 8; do
  printf '__attribute__((tls_model("initial-exec"))) __thread char b%s[400];\nchar *get%s(void){return b%s;}\n' $i $i $i |
    gcc -shared -fPIC -xc - -o libt$i.so -Wl,-soname,libt$i.so
done
echo 'int main(void){return 0;}' | gcc -xc - -o prog
