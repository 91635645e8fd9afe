# The machine of check-other-interpreters.
. "$MLD_SOURCE_DIR/test/golden/check-other-interpreters/setup.sh"
