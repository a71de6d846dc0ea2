#!/usr/bin/env bash
# build-assets.sh DEST [NAME...] builds the pinned real binaries (the servers,
# and the etcdctl and kubectl clients) into DEST, the cache directory
# internal/assets names for the current pins (tools/versions.mk and the tools
# modules' go.sum). Nothing is downloaded but Go modules. With NAMEs, only
# those binaries are built (`make demo` needs only kube-apiserver); the
# completion stamp is written only once every binary is there.
#
# A build prints which binary it builds, a line every 30 s while it runs,
# and how long it took.
#
# A DEST that already holds every binary and the completion stamp is left as
# it is, so a second run costs about a second. Each binary is built into a
# temporary name and renamed, so an interrupted build never leaves a partial
# binary that a later run would take as built.
set -euo pipefail
dest=${1:?usage: build-assets.sh DEST [NAME...]}
shift
wanted=("$@")
cd "$(dirname "$0")"
eval "$(sed -n 's/^\([A-Z_]*\) := \(.*\)$/\1=\2/p' versions.mk)"

etcd_dir() { echo "etcd-$(echo "$1" | cut -d. -f1,2)"; }
binaries=(kube-apiserver kube-controller-manager "etcd-${ETCD_VERSION}" "etcd-${ETCD_OLD_VERSION}" etcdctl kubectl)

for w in "${wanted[@]}"; do
	[[ " ${binaries[*]} " == *" $w "* ]] || { echo "assets: unknown binary $w (known: ${binaries[*]})" >&2; exit 2; }
done
# all_built reports whether every binary named (all of them with no names)
# is in DEST.
all_built() {
	local b names=("$@")
	((${#names[@]})) || names=("${binaries[@]}")
	for b in "${names[@]}"; do [[ -x "$dest/$b" ]] || return 1; done
}
if ((${#wanted[@]})) && all_built "${wanted[@]}"; then
	echo "assets: ${wanted[*]} up to date in $dest"
	exit 0
fi
if [[ -f "$dest/.complete" ]] && all_built; then
	echo "assets: up to date in $dest"
	exit 0
fi
mkdir -p "$dest"
rm -f "$dest/.complete"

major=$(echo "$KUBE_VERSION" | sed 's/^v\([0-9]*\)\..*/\1/')
minor=$(echo "$KUBE_VERSION" | sed 's/^v[0-9]*\.\([0-9]*\)\..*/\1/')
kube_ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	kube_ldflags+=" -X ${pkg}.gitVersion=${KUBE_VERSION}"
	kube_ldflags+=" -X ${pkg}.gitMajor=${major} -X ${pkg}.gitMinor=${minor}"
	kube_ldflags+=" -X ${pkg}.gitTreeState=clean"
done

build() { # name moduledir package [go build flags...]
	local name=$1 dir=$2 pkg=$3
	shift 3
	if [[ -x "$dest/$name" ]]; then
		echo "assets: $name already built"
		return
	fi
	if ((${#wanted[@]})) && [[ " ${wanted[*]} " != *" $name "* ]]; then
		return
	fi
	local start=$SECONDS
	echo "assets: building $name (from tools/$dir) ..."
	(while sleep 30; do echo "assets: still building $name ($((SECONDS - start))s)"; done) &
	local ticker=$!
	local rc=0
	(cd "$dir" && CGO_ENABLED=0 go build -trimpath "$@" -o "$dest/.$name.tmp" "$pkg") || rc=$?
	kill "$ticker" 2>/dev/null || true
	wait "$ticker" 2>/dev/null || true
	if ((rc)); then
		echo "assets: building $name failed (exit $rc) after $((SECONDS - start))s; nothing was installed for it" >&2
		exit "$rc"
	fi
	mv "$dest/.$name.tmp" "$dest/$name"
	echo "assets: built $name in $((SECONDS - start))s"
}

build "etcd-${ETCD_VERSION}" "$(etcd_dir "$ETCD_VERSION")" go.etcd.io/etcd/server/v3
build "etcd-${ETCD_OLD_VERSION}" "$(etcd_dir "$ETCD_OLD_VERSION")" go.etcd.io/etcd/server/v3
build kube-apiserver kube k8s.io/kubernetes/cmd/kube-apiserver \
	-tags=selinux,notest,grpcnotrace -ldflags "-s -w ${kube_ldflags}"
build kube-controller-manager kube k8s.io/kubernetes/cmd/kube-controller-manager \
	-tags=selinux,notest,grpcnotrace -ldflags "-s -w ${kube_ldflags}"
# The clients: etcdctl at ETCD_VERSION (same module as that etcd), kubectl
# stamped like the servers so `kubectl version --client` names KUBE_VERSION.
build etcdctl "$(etcd_dir "$ETCD_VERSION")" go.etcd.io/etcd/etcdctl/v3
build kubectl kube k8s.io/kubernetes/cmd/kubectl \
	-tags=selinux,notest,grpcnotrace -ldflags "-s -w ${kube_ldflags}"

if ((${#wanted[@]})); then
	for w in "${wanted[@]}"; do
		case $w in
		etcdctl) "$dest/$w" version | sed -n 1p ;;
		kubectl) "$dest/$w" version --client ;;
		*) "$dest/$w" --version | sed -n 1p ;;
		esac
	done
	if all_built; then touch "$dest/.complete"; fi
	echo "assets: ${wanted[*]} ready in $dest"
	exit 0
fi
"$dest/kube-apiserver" --version
"$dest/etcd-${ETCD_VERSION}" --version | sed -n 1p
"$dest/etcd-${ETCD_OLD_VERSION}" --version | sed -n 1p
"$dest/etcdctl" version
"$dest/kubectl" version --client
touch "$dest/.complete"
echo "assets: ready in $dest"
