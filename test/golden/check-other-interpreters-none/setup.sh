# A machine without any of the known packages: a Python built into
# /usr/local (the one on PATH), Debian's with only requests, a pyenv version
# with only pip, and a virtualenvs directory holding a symlink loop.
M="$T/machine"
. "$LIB/python-layout.sh"
py "$M/usr/local" 3.12
ln -s python3.12 "$M/usr/local/bin/python3"
py "$M/usr" 3.11
ln -s python3.11 "$M/usr/bin/python3"
egg "$M/usr/lib/python3/dist-packages" requests 2.28.1
py "$M/home/u/.pyenv/versions/3.12.1" 3.12
ln -s python3.12 "$M/home/u/.pyenv/versions/3.12.1/bin/python"
dist "$M/home/u/.pyenv/versions/3.12.1/lib/python3.12/site-packages" pip 23.2.1
mkdir -p "$M/home/u/.virtualenvs"
ln -s loop "$M/home/u/.virtualenvs/loop"
