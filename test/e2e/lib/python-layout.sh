# python-layout.sh — builders of Python installations for fixture trees
# (golden setup.sh scripts source it as "$LIB/python-layout.sh"). Interpreter
# files are placeholders: layout inference reads the layout around them
# (lib/pythonX.Y, pyvenv.cfg, site- and dist-packages), never the file.

py() {  # py PREFIX X.Y: an interpreter PREFIX/bin/pythonX.Y and its lib/pythonX.Y
  mkdir -p "$1/bin" "$1/lib/python$2/lib-dynload"
  printf 'placeholder interpreter\n' > "$1/bin/python$2"
  chmod +x "$1/bin/python$2"
  : > "$1/lib/python$2/os.py"
  : > "$1/lib/python$2/lib-dynload/_ssl.cpython-${2/./}-x86_64-linux-gnu.so"
}

dist() {  # dist SITE NAME VERSION [import-name]: a wheel's dist-info and its package
  mkdir -p "$1/$2-$3.dist-info" "$1/${4:-$2}"
  printf 'Metadata-Version: 2.1\nName: %s\nVersion: %s\n' "$2" "$3" > "$1/$2-$3.dist-info/METADATA"
  printf '%s\n' "${4:-$2}" > "$1/$2-$3.dist-info/top_level.txt"
  : > "$1/${4:-$2}/__init__.py"
}

egg() {  # egg SITE NAME VERSION: Debian's egg-info directory and its package
  mkdir -p "$1/$2-$3.egg-info" "$1/$2"
  printf 'Metadata-Version: 2.1\nName: %s\nVersion: %s\n' "$2" "$3" > "$1/$2-$3.egg-info/PKG-INFO"
  printf '%s\n' "$2" > "$1/$2-$3.egg-info/top_level.txt"
  : > "$1/$2/__init__.py"
}
