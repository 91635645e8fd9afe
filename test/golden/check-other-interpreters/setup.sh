# The machine's tree in $T/machine (test/e2e/lib/python-layout.sh).
M="$T/machine"
. "$LIB/python-layout.sh"

# Debian 12's Python 3.11 with python3-torch, python3-numba, python3-opencv.
py "$M/usr" 3.11
ln -s python3.11 "$M/usr/bin/python3"
printf '#!/bin/sh\n' > "$M/usr/bin/python3.11-config"
DEB="$M/usr/lib/python3/dist-packages"
egg "$DEB" torch 1.13.0a0+gitunknown
printf "__version__ = '1.13.0a0'\ndebug = False\ncuda = None\n" > "$DEB/torch/version.py"
egg "$DEB" numba 0.56.4
egg "$DEB" numpy 1.24.2
: > "$DEB/cv2.cpython-311-x86_64-linux-gnu.so"   # Debian's cv2: no metadata

# pyenv: the global version has nothing; another has numpy.
PR="$M/root/.pyenv"
mkdir -p "$PR/shims"
cat > "$PR/shims/python3" <<'SH'
#!/usr/bin/env bash
set -e
[ -n "$PYENV_DEBUG" ] && set -x

program="${0##*/}"

export PYENV_ROOT="/root/.pyenv"
exec "/root/.pyenv/libexec/pyenv" exec "$program" "$@"
SH
chmod +x "$PR/shims/python3"
printf '3.11.7\n' > "$PR/version"
py "$PR/versions/3.11.7" 3.11
ln -s python3.11 "$PR/versions/3.11.7/bin/python3"
ln -s python3.11 "$PR/versions/3.11.7/bin/python"
dist "$PR/versions/3.11.7/lib/python3.11/site-packages" pip 23.2.1
py "$PR/versions/3.10.13" 3.10
ln -s python3.10 "$PR/versions/3.10.13/bin/python"
dist "$PR/versions/3.10.13/lib/python3.10/site-packages" numpy 1.26.4

# Miniconda: an empty base and a training env.
C="$M/root/miniconda3"
py "$C" 3.12
ln -s python3.12 "$C/bin/python"
py "$C/envs/train" 3.10
ln -s python3.10 "$C/envs/train/bin/python"
dist "$C/envs/train/lib/python3.10/site-packages" numpy 1.26.4
dist "$C/envs/train/lib/python3.10/site-packages" scikit_learn 1.4.0 sklearn

# virtualenvs: one without packages on Debian's Python, one with OpenCV, one
# whose base Python was removed.
V="$M/root/.virtualenvs"
venv() {  # venv DIR X.Y HOME-BIN: a venv without system site packages
  mkdir -p "$1/bin" "$1/lib/python$2/site-packages"
  printf 'home = %s\ninclude-system-site-packages = false\nversion = %s\n' "$3" "$2" > "$1/pyvenv.cfg"
}
venv "$V/web" 3.11 /usr/bin
ln -s /usr/bin/python3.11 "$V/web/bin/python"
dist "$V/web/lib/python3.11/site-packages" requests 2.31.0
venv "$V/vision" 3.11 /usr/bin
ln -s /usr/bin/python3.11 "$V/vision/bin/python"
dist "$V/vision/lib/python3.11/site-packages" opencv_python_headless 4.9.0.80 cv2
venv "$V/old" 3.9 /usr/bin
ln -s /usr/bin/python3.9 "$V/old/bin/python"
