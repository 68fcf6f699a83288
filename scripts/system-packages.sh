#!/usr/bin/env bash
# The one list of system packages edgegossip needs, and what needs each. `make demo`, `make test`,
# `.ci/run`, docs/install.md and the from-scratch test (tests/test_prerequisites.py) all read this file.
#
#   system-packages.sh list [GROUP]      the table: group, package, command that proves it, use
#   system-packages.sh missing GROUP     packages of GROUP (and the groups it includes) not present
#   system-packages.sh commands GROUP    the commands of GROUP, one a line
#   system-packages.sh install GROUP     install what is missing (root, apt-get); exit 3 if it cannot
#
# Groups: build (make venv), demo (make demo: build + namespaces), test (make test: everything).
set -euo pipefail

# group   package           command or file that shows it is there     what needs it
TABLE='
build   build-essential     gcc                                        Cython extensions, pyzmq wheel build
build   g++                 g++                                        libzmq (C++) bundled in pyzmq
build   patch               patch                                      our libzmq udp_engine patch
build   python3-venv        @venv                                      the .venv of make venv
build   libssl-dev          /usr/include/openssl/sha.h                 the compiled wire path (libcrypto)
demo    iproute2            ip                                         network namespaces, veth, bridge, tbf
demo    nftables            nft                                        kernel packet loss in each namespace
test    iptables            iptables                                   podman network backend (netavark)
test    systemd-container   systemd-nspawn                             lab devices (booted Debian)
test    debootstrap         debootstrap                                lab and from-scratch roots
test    openssh-client      ssh                                        fleet commands against the lab
test    mtools              mcopy                                      fleet flash --image (FAT without mount)
test    dosfstools          mkfs.vfat                                  fleet flash tests: a FAT image
test    shellcheck          shellcheck                                 firstrun.sh and scripts checked
test    mount               losetup                                    fleet flash --device tests: a loop disk
test    e2fsprogs           debugfs                                    fleet flash --image: os-release of the image root
test    dataset-fashion-mnist /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz  the second task: data fetch fashion-mnist
test    podman              podman                                     emulate --export compose, run
test    podman-compose      podman-compose                             emulate --export compose, run
test    runc                runc                                       podman runtime here (crun fails)
test    netavark            /usr/lib/podman/netavark                   podman networks
test    aardvark-dns        /usr/lib/podman/aardvark-dns               podman service names
test    cloud-init          /usr/lib/python3/dist-packages/cloudinit   first-boot user-data checked
test    chromium            chromium                                   report.html rendered headless
test    prometheus          prometheus                                 a real scrape of a lab fleet
test    qemu-user-static    @qemu10                                    arm64 roots: the wheelhouse build, booted lab devices
test    binfmt-support      update-binfmts                             the aarch64 programs of that root run here
'

includes() {  # the groups a group stands for
  case "$1" in
    build) echo build ;;
    demo) echo build demo ;;
    test) echo build demo test ;;
    *) echo "system-packages.sh: unknown group '$1' (build, demo, test)" >&2; exit 2 ;;
  esac
}

rows() {  # the table rows of GROUP and the groups it includes
  local groups; groups=" $(includes "$1") "
  printf '%s\n' "$TABLE" | while read -r g pkg probe use; do
    if [ -n "$g" ] && [[ "$groups" == *" $g "* ]]; then
      printf '%s\t%s\t%s\t%s\n' "$g" "$pkg" "$probe" "$use"
    fi
  done
}

present() {
  case "$1" in
    @venv) python3 -c "import venv, ensurepip" 2>/dev/null ;;
    # systemd 253+ (Trixie's) boots under qemu-user from 10.0 on (7.2, Debian 12's, fails:
    # no execveat); Debian 12 has 10.0 in bookworm-backports
    @qemu10) command -v qemu-aarch64-static >/dev/null 2>&1 &&
      [ "$(qemu-aarch64-static --version | sed -n 's/^qemu-aarch64 version \([0-9]*\).*/\1/p')" -ge 10 ] ;;
    /*) [ -e "$1" ] ;;
    *) command -v "$1" >/dev/null 2>&1 ;;
  esac
}

codename() { sed -n "s/^VERSION_CODENAME=//p" /etc/os-release; }

backports() {  # the release's backports suite from the mirror apt already uses
  local list=/etc/apt/sources.list.d/edgegossip-backports.list mirror
  grep -rqs -- "$(codename)-backports" /etc/apt/sources.list /etc/apt/sources.list.d && return 0
  mirror=$(grep -rhoE '(URIs:[[:space:]]*|^deb[[:space:]]+(\[[^]]*\][[:space:]]+)?)[^[:space:]]+/debian([[:space:]]|$)' \
    /etc/apt/sources.list /etc/apt/sources.list.d 2>/dev/null | grep -oE "[^[:space:]]+/debian" | head -n 1 || true)
  echo "deb ${mirror:-http://deb.debian.org/debian} $(codename)-backports main" > "$list"
  apt-get update -qq
}

missing() {
  rows "$1" | while IFS=$'\t' read -r _ pkg probe _; do
    if ! present "$probe"; then echo "$pkg"; fi
  done
}

cmd=${1:-list}
group=${2:-test}
case "$cmd" in
  list) rows "$group" | column -t -s $'\t' 2>/dev/null || rows "$group" ;;
  commands) rows "$group" | cut -f3 | grep -v '^@' ;;
  missing) missing "$group" ;;
  install)
    need=$(missing "$group" | tr '\n' ' ')
    [ -z "${need// /}" ] && exit 0
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
      echo "system-packages.sh: missing$([ -n "$need" ] && echo ": $need")(needs root and apt-get to install)" >&2
      exit 3
    fi
    echo "installing system packages for '$group':$need"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $need >/dev/null
    still=$(missing "$group" | tr '\n' ' ')
    if [ -n "${still// /}" ]; then
      # too old in this release (see present): from its backports, which Debian keeps for that
      backports
      # shellcheck disable=SC2086
      apt-get install -y -qq --no-install-recommends -t "$(codename)-backports" $still >/dev/null
      still=$(missing "$group" | tr '\n' ' ')
    fi
    if [ -n "${still// /}" ]; then
      echo "system-packages.sh: still missing after install: $still" >&2; exit 1
    fi
    ;;
  *) echo "usage: system-packages.sh list|missing|commands|install [build|demo|test]" >&2; exit 2 ;;
esac
