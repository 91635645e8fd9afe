# libuser.so was linked against a libprov.so that defines PROV_2; the one
# installed defines only PROV_1 (the GLIBCXX_3.4.30 situation in miniature).
mkdir -p new old
printf 'PROV_1 { global: f1; local: *; };\nPROV_2 { global: f2; } PROV_1;\n' > new.map
printf 'PROV_1 { global: f1; local: *; };\n' > old.map
echo 'int f1(void){return 1;} int f2(void){return 2;}' | gcc -shared -fPIC -xc - -o new/libprov.so -Wl,-soname,libprov.so -Wl,--version-script,new.map
echo 'int f1(void){return 1;}' | gcc -shared -fPIC -xc - -o old/libprov.so -Wl,-soname,libprov.so -Wl,--version-script,old.map
echo 'int f2(void); int user(void){return f2();}' | gcc -shared -fPIC -xc - -o libuser.so -Wl,-soname,libuser.so -Lnew -lprov -Wl,--enable-new-dtags,-rpath,'$ORIGIN/old'
