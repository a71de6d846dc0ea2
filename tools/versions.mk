# versions.mk pins the real binaries `make assets` builds from Go modules.
# Bump one line, run `make tools-mod` to regenerate tools/*/go.mod and go.sum,
# then `make assets`. The asset cache key covers this file and every go.sum
# under tools/, so a bump builds into a fresh cache directory.
KUBE_VERSION := v1.37.2
ETCD_VERSION := v3.7.3
ETCD_OLD_VERSION := v3.6.16
