# Two OpenMP runtimes in one process (GNU libgomp from the system and LLVM
# libomp), plus a wheel-style vendored copy of libgomp under a hashed soname
# (as auditwheel names it): OMP001 and LD004.
mkdir -p vendor
cp /usr/lib/x86_64-linux-gnu/libgomp.so.1 vendor/libgomp-a34b3233.so.1
patchelf --set-soname libgomp-a34b3233.so.1 vendor/libgomp-a34b3233.so.1
echo 'int g(void){return 0;}' | gcc -shared -fPIC -xc - -o libgnu.so -Wl,-soname,libgnu.so -Wl,--no-as-needed -l:libgomp.so.1
echo 'int l(void){return 0;}' | gcc -shared -fPIC -xc - -o libllvm.so -Wl,-soname,libllvm.so -Wl,--no-as-needed -l:libomp.so.5
echo 'int w(void){return 0;}' | gcc -shared -fPIC -xc - -o libwheel.so -Wl,-soname,libwheel.so -Wl,--no-as-needed -Lvendor -l:libgomp-a34b3233.so.1 -Wl,--enable-new-dtags,-rpath,'$ORIGIN/vendor'
echo 'int main(void){return 0;}' | gcc -xc - -o app -Wl,--no-as-needed -L. -lgnu -lllvm -lwheel -Wl,--enable-new-dtags,-rpath,'$ORIGIN'
