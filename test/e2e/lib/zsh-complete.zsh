# Prints the candidates zsh's completion system offers for a command line,
# one per line (used by cli-docs.py). A real interactive zsh runs in a
# pseudo-terminal (zpty) with compinit and the completion under test on
# fpath; compadd is wrapped to print what the completion functions add.
# usage: zsh zsh-complete.zsh FPATH_DIR "command line to complete"
zmodload zsh/zpty || exit 3
zpty z zsh -f -i
# The terminal echoes what is typed: no echo, and markers written split
# (MLD''READY) so that an echo that still comes through never matches them.
zpty -w z "stty -echo"
zpty -w z "PROMPT='' RPROMPT=''"
zpty -w z "fpath=($1 \$fpath); autoload -Uz compinit; compinit -u -D"
zpty -w z 'compprefuncs=( _mld_cap ); _mld_cap() { compadd() { local -a __hits; builtin compadd -O __hits "$@"; print -r -l -- "MLD""CAND:${^__hits[@]}" }; comppostfuncs=( _mld_end ) }; _mld_end() { print MLD""END }'
zpty -w z 'bindkey "^I" complete-word; print MLD""READY'
zpty -r -m z line '*MLDREADY*'
zpty -w -n z "$2"$'\t'
zpty -r -m z out '*MLDEND*'
print -r -- "$out" | tr -d '\r' | grep -o 'MLDCAND:[^[:space:]]*' | sed 's/MLDCAND://' | sort -u
zpty -d z
