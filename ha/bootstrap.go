package ha

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"strings"
	"time"

	"stratum.dev/stratum/internal/addons"
	"stratum.dev/stratum/internal/discovery"
	"stratum.dev/stratum/internal/host"
	"stratum.dev/stratum/internal/netcfg"
	"stratum.dev/stratum/internal/nodelock"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/pki"
	"stratum.dev/stratum/internal/version"
)

// BootstrapOptions are `stratum up`'s settings for the first control plane of
// a new cluster. On a node that already has state they are not used: `up`
// then starts what the state records.
type BootstrapOptions struct {
	NodeIP, ConfigNodeIP string
	VIP                  nodestate.VIP
	PodCIDR, ServiceCIDR string
	ClusterDomain        string
	Cilium               addons.CiliumSettings
	Profile              string
	SELinuxOptOut        bool
}

// Up is `stratum up`: on a node with saved control-plane state it starts that
// control plane (StartControlPlane); on a node with a surviving join intent
// it refuses (ErrIntentSurvives); on a fresh node it bootstraps the first
// control plane of a new cluster: the cluster's CAs, this node's leaves and
// kubeconfigs, a single-member etcd, the apiserver, kube-vip, and the
// cluster-info a joiner discovers the CA from.
func (n *Node) Up(ctx context.Context, o BootstrapOptions) (*nodestate.NodeState, error) {
	h := n.env.Host
	if _, err := nodestate.Load(h); err == nil {
		return n.StartControlPlane(ctx)
	} else if !errors.Is(err, nodestate.ErrNoState) {
		return nil, err
	}
	if survives, err := n.JoinIntentSurvives(ctx); err != nil {
		return nil, err
	} else if survives {
		return n.StartControlPlane(ctx) // refuses, naming the journal
	}
	return n.bootstrap(ctx, o)
}

func (n *Node) bootstrap(ctx context.Context, o BootstrapOptions) (*nodestate.NodeState, error) {
	h := n.env.Host
	name := h.Name()
	netc := netcfg.Config{PodCIDR: o.PodCIDR, ServiceCIDR: o.ServiceCIDR, ClusterDomain: o.ClusterDomain}.WithDefaults()
	if err := netc.Validate(); err != nil {
		return nil, fmt.Errorf("stratum up refused: %w; nothing was changed", err)
	}
	if o.VIP.Address != "" && net.ParseIP(o.VIP.Address) == nil {
		return nil, fmt.Errorf("stratum up refused: the VIP %q is not an IP address; nothing was changed", o.VIP.Address)
	}
	release, err := nodelock.AcquireBoth(h, "stratum up (bootstrap)")
	if err != nil {
		return nil, err
	}
	defer release()
	if entries, err := h.ReadDir(version.EtcdDataDir); err == nil && len(entries) > 0 {
		return nil, fmt.Errorf("%w in %s but no node state; nothing was changed: this node was a member of some cluster; remove the directory to bootstrap a new one, or rejoin with `stratum etcd rejoin`", ErrRetainedData, version.EtcdDataDir)
	}
	// The CAs are made once: a bootstrap re-run after a crash keeps the ones
	// it already wrote, so the leaves and kubeconfigs it wrote stay valid.
	shared, err := n.loadOrMakeShared()
	if err != nil {
		return nil, err
	}
	st := &nodestate.NodeState{Role: nodestate.RoleControlPlane, NodeName: name, VIP: o.VIP,
		PodCIDR: netc.PodCIDR, ServiceCIDR: netc.ServiceCIDR, ClusterDomain: netc.ClusterDomain, Cilium: o.Cilium, Profile: o.Profile}
	var nodeIP string
	_, err = AssembleNodeContext(ctx, NodeAssembly{
		HostDirs:      func() error { return host.Dirs(h) },
		Prereqs:       func(po host.PrereqOptions) error { return host.Prereqs(h, po) },
		ResolveNet:    func() (netcfg.Config, error) { return netc, nil },
		TrustPodCIDRs: func(c string) { _ = host.TrustPodCIDRs(h, c) },
		ResolveNodeIP: host.ResolveNodeIP,
		DetectNodeIPs: func(dual bool) (string, error) { return host.DetectNodeIPs(h, dual) },
		BeforeCerts: func(c host.NodeIPChoice) error {
			nodeIP = strings.SplitN(c.IP, ",", 2)[0]
			st.NodeIP = nodeIP
			st.Server = "https://" + net.JoinHostPort(nodeIP, fmt.Sprint(version.APIServerPort))
			if o.VIP.Address != "" {
				st.Server = "https://" + net.JoinHostPort(o.VIP.Address, fmt.Sprint(version.APIServerPort))
			}
			return nil
		},
		IssueCerts: func(hostname, ip string, sans *pki.APISANs) error {
			return n.issueLeavesFrom(shared, hostname, ip, sans)
		},
		WriteKubeconfigs:    func(_, _ string, _ bool) error { return n.writeKubeconfigs(st.Server) },
		WriteProfileConfigs: func() error { return writeProfileConfigs(h, o.Profile) },
		WriteRuntimeConfigs: func(st *nodestate.NodeState) error { return writeRuntimeConfigs(h, st) },
	}, AssembleRequest{Hostname: name, NodeIPFlag: o.NodeIP, ConfigNodeIP: o.ConfigNodeIP, VIPAddress: o.VIP.Address,
		PrereqOptions: host.PrereqOptions{Profile: o.Profile, SELinuxOptOut: o.SELinuxOptOut}, State: st})
	if err != nil {
		return nil, err
	}
	peerURL := "https://" + net.JoinHostPort(nodeIP, fmt.Sprint(version.EtcdPeerPort))
	st.Etcd = nodestate.Etcd{Name: name, PeerURL: peerURL, ClientURL: EtcdEndpoint(nodeIP),
		InitialCluster: name + "=" + peerURL, InitialClusterState: "new"}
	if err := nodestate.Save(h, st); err != nil {
		return nil, err
	}
	release()
	if _, err := n.StartControlPlane(ctx); err != nil {
		return st, err
	}
	if err := n.publishForJoiners(ctx, st, shared); err != nil {
		return st, err
	}
	return st, nil
}

// loadOrMakeShared returns the cluster CAs on this node, making and writing
// them when there are none.
func (n *Node) loadOrMakeShared() (*pki.Shared, error) {
	h := n.env.Host
	files := map[string][]byte{}
	missing := 0
	for _, name := range pki.SharedFileNames() {
		b, err := h.ReadFile(version.PKIFile(name))
		if errors.Is(err, fs.ErrNotExist) {
			missing++
			continue
		}
		if err != nil {
			return nil, err
		}
		files[name] = b
	}
	if missing == 0 {
		return pki.LoadShared(files)
	}
	if missing != len(pki.SharedFileNames()) {
		return nil, fmt.Errorf("%s holds some of the cluster CAs but not all; nothing was changed: restore them, or remove them all to make new ones", version.PKIDir)
	}
	shared, err := pki.NewShared(h.Now())
	if err != nil {
		return nil, err
	}
	for name, data := range shared.Files() {
		mode := fs.FileMode(0o644)
		if strings.HasSuffix(name, ".key") {
			mode = 0o600
		}
		if err := h.WriteFile(version.PKIFile(name), data, mode); err != nil {
			return nil, err
		}
	}
	return shared, nil
}

// issueLeavesFrom mints and writes this node's leaves from shared.
func (n *Node) issueLeavesFrom(shared *pki.Shared, hostname, nodeIP string, sans *pki.APISANs) error {
	h := n.env.Host
	ip := net.ParseIP(nodeIP)
	if ip == nil {
		return fmt.Errorf("node IP %q is not an IP address", nodeIP)
	}
	leaves, err := pki.NodeLeaves(shared, hostname, ip, sans, h.Now())
	if err != nil {
		return err
	}
	for name, data := range leaves {
		mode := fs.FileMode(0o644)
		if strings.HasSuffix(name, ".key") {
			mode = 0o600
		}
		if err := h.WriteFile(version.PKIFile(name), data, mode); err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
	}
	return nil
}

// publishForJoiners publishes what a joiner needs before any grant is
// minted: the CA in cluster-info, the certs-reader grant and its fence policy.
func (n *Node) publishForJoiners(ctx context.Context, st *nodestate.NodeState, shared *pki.Shared) error {
	cs, err := n.adminClient()
	if err != nil {
		return err
	}
	deadline := time.Now().Add(time.Minute)
	for {
		err = discovery.Publish(ctx, cs, st.Server, shared.Cluster.CertPEM)
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond) // the apiserver's RBAC bootstrap may still be settling
	}
	if err != nil {
		return fmt.Errorf("publish cluster-info for joiners: %w; the control plane runs: re-run `stratum up` to retry", err)
	}
	if err := n.GrantCertsReader(ctx, cs); err != nil {
		return fmt.Errorf("grant joiners read access to the shared certificates: %w; re-run `stratum up` to retry", err)
	}
	return nil
}
