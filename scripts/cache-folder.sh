# Sourced by the build scripts (build-binaries.sh, build-monitoring-tools.sh,
# build-upgrade-binaries.sh): `claim_cache_folder DIR`. When DIR holds a finished build (its
# .complete marker), prints DIR and ends the calling script. Otherwise creates DIR and holds its lock
# (fd 9) until that script ends: one build per cache folder at a time, so a second clone (or CI beside
# a developer) waits for the first and then finds the binaries, instead of compiling the same
# packages again on the same two cores.
claim_cache_folder() {
  local out=$1
  if [ -f "$out/.complete" ]; then
    echo "$out"
    exit 0
  fi
  mkdir -p "$out"
  exec 9>"$out.lock"
  flock 9
  if [ -f "$out/.complete" ]; then
    echo "$out"
    exit 0
  fi
}
