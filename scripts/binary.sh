# Sourced by the scripts that run the kernel (scripts/web, scripts/run, scripts/smoke-upload): sets and
# exports HEALTHKERNEL_BIN, building only when no usable binary is here. In order:
#   1. $HEALTHKERNEL_BIN, as given;
#   2. this checkout's release build, when it is newer than every source (or when there is no Swift to
#      build a newer one);
#   3. a release build, when Swift is here (incremental: seconds when little changed);
#   4. `healthkernel` on PATH (the Debian package, or the release tarball's binary put there);
#   5. else a message naming the three ways to get one, and exit 2.
find_binary() {
  if [ -n "${HEALTHKERNEL_BIN:-}" ]; then export HEALTHKERNEL_BIN; return 0; fi
  local built=$PWD/.build/release/healthkernel have_swift=
  command -v swift >/dev/null 2>&1 && have_swift=1
  if [ -x "$built" ] && { [ -z "$have_swift" ] || [ -z "$(find Sources Package.swift -newer "$built" -print -quit)" ]; }; then
    export HEALTHKERNEL_BIN=$built
  elif [ -n "$have_swift" ]; then
    swift build -c release --static-swift-stdlib --product healthkernel >&2
    export HEALTHKERNEL_BIN=$built
  elif command -v healthkernel >/dev/null 2>&1; then
    HEALTHKERNEL_BIN=$(command -v healthkernel)
    export HEALTHKERNEL_BIN
  else
    cat >&2 <<'MSG'
no healthkernel binary here, and no Swift toolchain to build one. Get one of three ways:
  - the release tarball (dist/healthkernel-VERSION-linux-x86_64.tar.gz): put its healthkernel on PATH,
    or set HEALTHKERNEL_BIN to it;
  - the Debian package (dist/healthkernel_VERSION_amd64.deb): dpkg -i it (installs /usr/bin/healthkernel);
  - for Node apps, the npm tarball (dist/healthkernel-VERSION.tgz), which carries the binary.
MSG
    exit 2
  fi
}
