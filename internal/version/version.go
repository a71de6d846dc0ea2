// Package version pins the component versions stratum runs and names the
// paths it keeps on a node.
//
// Paths are absolute paths inside a host's root: host.Local resolves them
// against "/", a simulated host against its own directory. The ha code therefore
// names the same file on every host, and no test has to redirect a path.
package version

import (
	"path"
	"strconv"
	"strings"
)

// Component versions this release of stratum runs. The binaries the simulator
// and the tests start are built from the same pins (tools/versions.mk); a test
// in internal/assets keeps the two in agreement.
const (
	Kubernetes   = "v1.37.2"
	Etcd         = "v3.7.3"
	EtcdPrevious = "v3.6.16"
)

// Paths on a node, inside the host's root.
const (
	// K8sConfDir holds the node's kubeconfigs and its PKI.
	K8sConfDir = "/etc/stratum"
	// PKIDir holds the shared CAs and this node's leaf certificates.
	PKIDir = K8sConfDir + "/pki"
	// EtcdPKIDir holds the etcd CA and this node's etcd leaves.
	EtcdPKIDir = PKIDir + "/etcd"
	// StateDir holds the node state and the join intent journal.
	StateDir = "/var/lib/stratum"
	// EtcdDataDir is the local etcd member's data directory.
	EtcdDataDir = StateDir + "/etcd"
	// LockDir holds the node's exclusive locks.
	LockDir = "/run/stratum"
)

// Ports every control plane serves on its own address.
const (
	EtcdClientPort = 2379
	EtcdPeerPort   = 2380
	APIServerPort  = 6443
)

// Kubeconfig is the path of the named kubeconfig ("admin", "bootstrap", ...).
func Kubeconfig(name string) string { return path.Join(K8sConfDir, name+".conf") }

// PKIFile is the path of a file named relative to PKIDir ("ca.crt", "etcd/ca.crt").
func PKIFile(name string) string { return path.Join(PKIDir, name) }

// MajorMinor reads a version such as "v3.7.3", "3.7.0", "v1.37.2" or "3.6"
// as its major and minor numbers; ok is false for anything else.
func MajorMinor(v string) (major, minor int, ok bool) {
	parts := strings.SplitN(strings.TrimPrefix(strings.TrimSpace(v), "v"), ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	maj, err1 := strconv.Atoi(parts[0])
	min, err2 := strconv.Atoi(parts[1])
	return maj, min, err1 == nil && err2 == nil
}
