// Package nodestate is the node's persisted record of what it is: its name and
// address, the endpoint its kubeconfigs target, the cluster VIP, and how its
// etcd member boots. The supervisor renders etcd's flags from it, so it is
// saved only once everything it records is true, and read on every start.
package nodestate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"

	"stratum.dev/stratum/internal/addons"
	"stratum.dev/stratum/internal/host"
	"stratum.dev/stratum/internal/version"
)

// Path is where the node state lives on a node.
var Path = path.Join(version.StateDir, "node-state.json")

// ErrNoState matches a Load on a node that has never saved its state.
var ErrNoState = errors.New("no node state")

// ErrMalformed matches a Load of a state file that is not a node state
// (truncated by a damaged disk, edited by hand): a forced reset may wipe
// such a node, naming the member it could not read.
var ErrMalformed = errors.New("malformed node state")

// Role is what a node is in the cluster.
type Role string

const (
	// RoleControlPlane runs etcd and a kube-apiserver.
	RoleControlPlane Role = "control-plane"
	// RoleWorker runs neither.
	RoleWorker Role = "worker"
)

// VIP is the cluster's one client address: kube-vip holds it on one control
// plane at a time.
type VIP struct {
	// Address is the VIP ("" when the cluster has none).
	Address string `json:"address,omitempty"`
	// Interface is the network interface kube-vip announces it on.
	Interface string `json:"interface,omitempty"`
}

// Etcd is how the local etcd member boots.
type Etcd struct {
	// Name is the member name (the node name).
	Name string `json:"name"`
	// PeerURL and ClientURL are the member's own advertised URLs.
	PeerURL   string `json:"peerURL"`
	ClientURL string `json:"clientURL"`
	// InitialCluster is ETCD_INITIAL_CLUSTER ("name=peerURL,...").
	InitialCluster string `json:"initialCluster"`
	// InitialClusterState is "new" for the first control plane and "existing"
	// for one that joined.
	InitialClusterState string `json:"initialClusterState"`
	// ClusterID is the etcd cluster this member belongs to, in hex, once known.
	ClusterID string `json:"clusterID,omitempty"`
	// MemberID is this member's ID in hex, once known.
	MemberID string `json:"memberID,omitempty"`
	// Started is set once this member has served on the data in its data
	// directory: from then on a data directory without etcd's data is data
	// that is not there (a disk not mounted at boot), never a first start,
	// and etcd is not started on it. A rejoin, which replaces the data,
	// clears it.
	Started bool `json:"started,omitempty"`
	// QuotaBackendBytes is the member's --quota-backend-bytes, the database
	// size at which it raises NOSPACE and refuses every write; 0 is etcd's
	// default, 2 GiB. A join takes the cluster's (its members' largest).
	QuotaBackendBytes int64 `json:"quotaBackendBytes,omitempty"`
}

// FirstIP is the node's first address: NodeIP itself, or on a dual-stack
// node ("v4,v6") the address before the comma, which its kube-apiserver
// advertises and its clients dial.
func FirstIP(nodeIP string) string {
	first, _, _ := strings.Cut(nodeIP, ",")
	return first
}

// NodeState is the node's persisted record.
type NodeState struct {
	Version  int    `json:"version"`
	Role     Role   `json:"role"`
	NodeName string `json:"nodeName"`
	NodeIP   string `json:"nodeIP"`
	// Server is the endpoint every kubeconfig on this node targets.
	Server string `json:"server"`
	VIP    VIP    `json:"vip"`
	// PodCIDR, ServiceCIDR and ClusterDomain are the cluster's network.
	PodCIDR       string `json:"podCIDR,omitempty"`
	ServiceCIDR   string `json:"serviceCIDR,omitempty"`
	ClusterDomain string `json:"clusterDomain,omitempty"`
	// Profile is the node profile by name ("" for none).
	Profile string `json:"profile,omitempty"`
	// Cilium is the cluster's Cilium settings, which every control plane
	// must share (they ride to a joiner with the shared certificates).
	Cilium addons.CiliumSettings `json:"cilium,omitempty"`
	Etcd   Etcd                  `json:"etcd"`
}

// CurrentVersion is the format this package writes. It is raised with every
// field whose meaning a stratum that does not know it would get wrong, so
// that stratum refuses the file (Load) instead of ignoring the field and
// dropping it at its next Save: a binary rolled back on one node would
// otherwise start etcd at the default quota under a database grown past it
// (NOSPACE for the whole cluster) and start a member that has served on a
// data directory that a disk not mounted left empty. Each version reads
// every older one. Versions: 1, the first; 2, etcd.started and
// etcd.quotaBackendBytes (written under version 1 until 2026-12-06).
// TestFormatVersionFollowsTheFields fails when the fields differ from those
// recorded for CurrentVersion.
const CurrentVersion = 2

// Load reads the node state from h. A node that never saved one gets an error
// matching ErrNoState; an unreadable or malformed file is any other error,
// never "absent".
func Load(h host.Files) (*NodeState, error) {
	data, err := h.ReadFile(Path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w at %s", ErrNoState, Path)
	}
	if err != nil {
		return nil, fmt.Errorf("read node state %s: %w", Path, err)
	}
	var st NodeState
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("%w: %s cannot be parsed (%v); it was not changed: restore it from a backup (on a cluster's only control plane, the way to keep its data), or take this node out with `stratum reset --force` (which then names its etcd member to remove from a running control plane) and join it again", ErrMalformed, Path, err)
	}
	if st.Version > CurrentVersion {
		return nil, fmt.Errorf("node state %s has format version %d, newer than this stratum's %d: a newer stratum wrote it, and this one would ignore what it does not know; it was not changed: run the stratum that wrote it, or a newer one", Path, st.Version, CurrentVersion)
	}
	return &st, nil
}

// Save writes the node state atomically (fsync'd, renamed into place).
func Save(h host.Files, st *NodeState) error {
	if st.NodeName == "" {
		return errors.New("node state has no node name; nothing was saved")
	}
	st.Version = CurrentVersion
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("encode node state: %w", err)
	}
	if err := h.WriteFile(Path, append(data, '\n'), 0o600); err != nil {
		return fmt.Errorf("save node state %s: %w", Path, err)
	}
	return nil
}
