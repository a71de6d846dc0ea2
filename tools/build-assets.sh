#!/usr/bin/env bash
# build-assets.sh DEST builds the pinned real binaries (the servers, and the
# etcdctl and kubectl clients) into DEST, the cache directory internal/assets
# names for the current pins (tools/versions.mk and the tools modules' go.sum).
# Nothing is downloaded but Go modules.
#
# A DEST that already holds every binary and the completion stamp is left as
# it is, so a second run costs about a second. Each binary is built into a
# temporary name and renamed, so an interrupted build never leaves a partial
# binary that a later run would take as built.
set -euo pipefail
dest=${1:?usage: build-assets.sh DEST}
cd "$(dirname "$0")"
eval "$(sed -n 's/^\([A-Z_]*\) := \(.*\)$/\1=\2/p' versions.mk)"

etcd_dir() { echo "etcd-$(echo "$1" | cut -d. -f1,2)"; }
binaries=(kube-apiserver kube-controller-manager "etcd-${ETCD_VERSION}" "etcd-${ETCD_OLD_VERSION}" etcdctl kubectl)

if [[ -f "$dest/.complete" ]]; then
	ok=1
	for b in "${binaries[@]}"; do [[ -x "$dest/$b" ]] || ok=0; done
	if ((ok)); then
		echo "assets: up to date in $dest"
		exit 0
	fi
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
	local start=$SECONDS
	echo "assets: building $name (from tools/$dir) ..."
	(cd "$dir" && CGO_ENABLED=0 go build -trimpath "$@" -o "$dest/.$name.tmp" "$pkg")
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

"$dest/kube-apiserver" --version
"$dest/etcd-${ETCD_VERSION}" --version | head -1
"$dest/etcd-${ETCD_OLD_VERSION}" --version | head -1
"$dest/etcdctl" version
"$dest/kubectl" version --client
touch "$dest/.complete"
echo "assets: ready in $dest"
