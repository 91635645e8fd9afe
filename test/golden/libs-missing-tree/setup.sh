# exe -> liba.so (found through the executable's RUNPATH) -> libb.so (missing:
# RUNPATH is for direct dependencies only).
mkdir -p lib b
echo 'int b(void){return 1;}' | gcc -shared -fPIC -xc - -o b/libb.so -Wl,-soname,libb.so
echo 'int b(void); int a(void){return b();}' | gcc -shared -fPIC -xc - -o lib/liba.so -Wl,-soname,liba.so -Lb -lb
echo 'int a(void); int main(void){return a();}' | gcc -xc - -o exe -Llib -la -Wl,-rpath-link,b -Wl,--enable-new-dtags,-rpath,'$ORIGIN/lib'
