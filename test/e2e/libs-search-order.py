#!/usr/bin/env python3
"""`mldoctor libs` follows glibc's search order, checked against the real ld.so.

Each scenario builds fixture libraries with gcc, asks the real loader what it
loads (`ld.so --list`) and asserts that mldoctor predicts the same objects in
the same order, then asserts the provenance mldoctor reports for the object
that makes the scenario interesting.
"""
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
from mldtest import *  # noqa: E402,F401,F403

t = scratch()


def same_as_ldso(path, what, env=None, cwd=None):
    env = env or clean_env()
    real, rc, err = ldso_list(path, env=env, cwd=cwd)
    model, doc = model_list(path, env=env, cwd=cwd)
    check_eq(model, real, what + ": objects as ld.so --list loads them")
    return doc


def needed_of(doc, obj_suffix, name):
    for o in doc["inputs"][0]["objects"]:
        if (o["path"] or "").endswith(obj_suffix):
            for n in o["needed"]:
                if n["name"] == name:
                    return n
    fail("no DT_NEEDED %s in %s" % (name, obj_suffix))
    return {}


# 1. DT_RPATH of the loading chain: the executable's RPATH finds an indirect
#    dependency (liba needs libb; only the executable's RPATH has libb).
d = os.path.join(t, "rpath-chain")
os.makedirs(d + "/b")
build_lib(d + "/b/libb.so", soname="libb.so")
build_lib(d + "/liba.so", soname="liba.so", needed=[d + "/b/libb.so"], flags=["-Wl,-rpath-link," + d + "/b"])
# liba was linked with the full path of libb; relink with a plain soname need.
build_lib(d + "/liba.so", soname="liba.so", flags=["-L" + d + "/b", "-lb"])
build_exe(d + "/exe", rpath=d + ":" + d + "/b", flags=["-L" + d, "-la", "-Wl,-rpath-link," + d + "/b"])
doc = same_as_ldso(d + "/exe", "RPATH chain")
n = needed_of(doc, "/liba.so", "libb.so")
check_eq((n.get("how"), n.get("via")), ("DT_RPATH", d + "/exe"),
         "libb.so needed by liba.so is found through the DT_RPATH of its loader chain (the executable)")

# 2. DT_RUNPATH applies to direct dependencies only: the same layout with
#    RUNPATH leaves libb (needed by liba) to the default search -> not found.
d = os.path.join(t, "runpath-direct")
os.makedirs(d + "/b")
build_lib(d + "/b/libb.so", soname="libb.so")
build_lib(d + "/liba.so", soname="liba.so", flags=["-L" + d + "/b", "-lb"])
build_exe(d + "/exe", runpath=d, flags=["-L" + d, "-la", "-Wl,-rpath-link," + d + "/b"])
doc = same_as_ldso(d + "/exe", "RUNPATH is for direct needs only")
n = needed_of(doc, "/liba.so", "libb.so")
check_eq(n.get("how"), "not found", "libb.so is not found through the executable's RUNPATH")
p = mldoctor("libs", d + "/exe", env=clean_env(), check_rc=1)
check_in("libb.so => not found", p.stdout, "missing library is listed")
check_in("paths considered in this order:", p.stdout, "paths considered are shown")
check_in("ld.so.cache: libb.so (no entry)", p.stdout, "the cache lookup is among the paths considered")
check_in("system search path: /lib/x86_64-linux-gnu/libb.so (no such file)", p.stdout,
         "default directories are among the paths considered")
check_in("LD001", p.stdout, "missing library finding")

# 3. RPATH is ignored when the same object has RUNPATH; LD_LIBRARY_PATH comes
#    after RPATH but before RUNPATH.
d = os.path.join(t, "precedence")
for sub in ("r", "e", "u"):
    os.makedirs(d + "/" + sub)
    build_lib(d + "/%s/libx.so" % sub, soname="libx.so")
build_exe(d + "/exe-rpath", rpath=d + "/r", flags=["-L" + d + "/r", "-lx"])
build_exe(d + "/exe-runpath", runpath=d + "/u", flags=["-L" + d + "/u", "-lx"])
env = clean_env(LD_LIBRARY_PATH=d + "/e")
doc = same_as_ldso(d + "/exe-rpath", "RPATH before LD_LIBRARY_PATH", env=env)
check_eq(needed_of(doc, "/exe-rpath", "libx.so").get("path"), d + "/r/libx.so", "RPATH wins over LD_LIBRARY_PATH")
doc = same_as_ldso(d + "/exe-runpath", "LD_LIBRARY_PATH before RUNPATH", env=env)
check_eq(needed_of(doc, "/exe-runpath", "libx.so").get("how"), "LD_LIBRARY_PATH",
         "LD_LIBRARY_PATH wins over RUNPATH")
# Both tags on one object: only RUNPATH counts (readelf shows both).
build_exe(d + "/exe-both", flags=["-Wl,--enable-new-dtags", "-Wl,-rpath," + d + "/u",
                                  "-L" + d + "/u", "-lx"])
doc = same_as_ldso(d + "/exe-both", "RUNPATH only")

# 4. $ORIGIN is the directory of the path as opened (a symlink's directory,
#    not its target's), and DT_NEEDED cycles terminate.
d = os.path.join(t, "origin")
os.makedirs(d + "/real/lib")
os.makedirs(d + "/link")
build_lib(d + "/real/lib/libdep.so", soname="libdep.so")
build_lib(d + "/real/libtop.so", soname="libtop.so", runpath="$ORIGIN/lib",
          flags=["-L" + d + "/real/lib", "-ldep"])
os.makedirs(d + "/link/lib")
build_lib(d + "/link/lib/libdep.so", soname="libdep.so", source="int other(void){return 1;}\n")
os.symlink(d + "/real/libtop.so", d + "/link/libtop.so")
doc = same_as_ldso(d + "/link/libtop.so", "$ORIGIN of a symlink")
check_eq(needed_of(doc, "/link/libtop.so", "libdep.so").get("path"), d + "/link/lib/libdep.so",
         "$ORIGIN expands to the symlink's directory")

d = os.path.join(t, "cycle")
os.makedirs(d)
build_lib(d + "/libp.so", soname="libp.so")
build_lib(d + "/libq.so", soname="libq.so", runpath=d, flags=["-L" + d, "-lp"])
build_lib(d + "/libp.so", soname="libp.so", runpath=d, flags=["-L" + d, "-lq"])
same_as_ldso(d + "/libp.so", "dependency cycle")

# 5. DF_1_NODEFLIB: no cache, no default directories for this object's needs.
d = os.path.join(t, "nodeflib")
os.makedirs(d)
build_lib(d + "/libn.so", soname="libn.so", flags=["-Wl,-z,nodefaultlib", "-lz"])
doc = same_as_ldso(d + "/libn.so", "DF_1_NODEFLIB")
check_eq(needed_of(doc, "/libn.so", "libz.so.1").get("how"), "not found", "nodefaultlib skips the cache")

# 6. A soname answers for a later need of the same name; a need by full path.
d = os.path.join(t, "soname")
os.makedirs(d)
build_lib(d + "/libreal-1.2.so", soname="libreal.so.1")
build_lib(d + "/libuser.so", soname="libuser.so", needed=[d + "/libreal-1.2.so"], runpath=d)
os.symlink(d + "/libreal-1.2.so", d + "/libreal.so.1")
same_as_ldso(d + "/libuser.so", "need by path, then by soname")

# 7. $LIB and $PLATFORM in a RUNPATH.
d = os.path.join(t, "dst")
libdir = "lib/x86_64-linux-gnu"
os.makedirs(d + "/" + libdir)
build_lib(d + "/" + libdir + "/libl.so", soname="libl.so")
build_lib(d + "/libm1.so", soname="libm1.so", runpath=d + "/$LIB", flags=["-L" + d + "/" + libdir, "-ll"])
same_as_ldso(d + "/libm1.so", "$LIB expansion")

shutil.rmtree(t, ignore_errors=True)
finish("libs-search-order")
