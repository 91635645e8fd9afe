# shellcheck shell=bash
# Sourced by scripts/fetch-test-debs.sh and scripts/make-test-roots.sh: the
# archives this machine's apt already uses, read at run time from its sources
# under /etc/apt, so that no archive address is ever written into the
# repository. Nothing here changes the machine's apt configuration.

# The deb822 stanzas of the machine's sources, with Components replaced by $1
# (e.g. "non-free" or "main"). One-line "deb [signed-by=K] URI SUITE
# COMPONENTS..." entries are converted; deb-src entries and disabled stanzas
# are left out.
machine_sources() {
  local comp=$1 f
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk -v comp="$comp" '
      function flush() {
        if (types ~ /(^| )deb( |$)/ && uris != "" && suites != "" && enabled != "no") {
          print "Types: deb"; print "URIs: " uris; print "Suites: " suites
          print "Components: " comp
          if (signed != "") print "Signed-By: " signed
          print ""
        }
        types = uris = suites = signed = enabled = ""
      }
      /^[ \t]*#/ { next }
      /^[ \t]*$/ { flush(); next }
      {
        key = tolower($1); sub(/:$/, "", key); val = $0; sub(/^[^:]*:[ \t]*/, "", val)
        if (key == "types") types = val
        else if (key == "uris") uris = val
        else if (key == "suites") suites = val
        else if (key == "signed-by") signed = val
        else if (key == "enabled") enabled = tolower(val)
      }
      END { flush() }' "$f"
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    awk -v comp="$comp" '
      /^[ \t]*deb[ \t]/ {
        signed = ""; i = 2
        if ($2 ~ /^\[/) {
          opts = ""
          for (; i <= NF; i++) { opts = opts " " $i; if ($i ~ /\]$/) { i++; break } }
          if (match(opts, /signed-by=[^] ]+/)) signed = substr(opts, RSTART + 10, RLENGTH - 10)
        }
        print "Types: deb"; print "URIs: " $i; print "Suites: " $(i + 1)
        print "Components: " comp
        if (signed != "") print "Signed-By: " signed
        print ""
      }' "$f"
  done
}

# "URI KEYRING" of the machine's main Debian archive: the first source that
# serves a release suite (a suite name without "-", as "bookworm", not
# "bookworm-security" or "bookworm-updates"). KEYRING is "-" when the source
# names none. Prints nothing when there is no such source.
machine_main_archive() {
  machine_sources main | awk '
    /^URIs:/ { split(substr($0, 7), u, " "); uri = u[1] }
    /^Suites:/ { release = 0; for (i = 2; i <= NF; i++) if ($i !~ /-/) release = 1 }
    /^Signed-By:/ { key = $2 }
    /^$/ { if (release && uri != "") { print uri, (key == "" ? "-" : key); exit }
           uri = key = ""; release = 0 }'
}
