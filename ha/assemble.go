package ha

import (
	"context"
	"fmt"
	"net"
	"strings"

	"stratum.dev/stratum/internal/host"
	"stratum.dev/stratum/internal/netcfg"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/pki"
)

// AssembleRequest is what a caller hands the shared node assembly: the inputs
// the common steps consume, and the node state the runtime configs render
// from. State may be handed in partially built — the caller's hooks fill the
// fields only it knows (the netconfig's CIDRs, the resolved node IP, the
// carried membership) as the assembly resolves them — so the runtime configs
// still render the completed state.
type AssembleRequest struct {
	// Hostname is this node's name: the host the certificate and kubeconfig
	// effects run for, and the join's etcd member name.
	Hostname string
	// NodeIPFlag is --node-ip from the command line ("" when not given);
	// ConfigNodeIP is spec.network.nodeIP; SavedIP is the address a node with
	// saved state was brought up with ("" on a fresh bring-up or join). The IP
	// precedence is host.ResolveNodeIP's: flag, saved, config, $NODE_IP, then
	// detection.
	NodeIPFlag, ConfigNodeIP, SavedIP string
	// VIPAddress is the cluster VIP ("" when none): the extra apiserver SAN,
	// the kubeconfigs' VIP marker, and a controller's client-facing endpoint.
	// When empty, the VIP that ResolveNet records in State.VIP counts.
	VIPAddress string
	// APIServer is the endpoint every kubeconfig on this node targets: the
	// node state's recorded endpoint (bring-up's rule — the VIP when
	// configured, the local apiserver otherwise — which the join records
	// too), not the join URL.
	APIServer string
	// PrereqOptions are the host-preparation settings the prerequisites check
	// runs with (host.PrereqOptions): the node's profile, whose config files
	// the assembly writes, the SELinux opt-out, and whether this node was
	// brought up before.
	PrereqOptions host.PrereqOptions
	// State is the node state the runtime configs render from.
	State *nodestate.NodeState
}

// NodeAssembly is the shared node assembly's effects, as one struct parameter
// in the style of joinEffects and tokenSteps (internal/token/token.go): the
// safety order — every step that can refuse returns before the steps that
// follow — is otherwise held only by statement order, which no test can
// observe without touching the host. A struct rather than package variables
// keeps the tests that use a recording set safe to run in parallel.
//
// ResolveNet hands the assembly the cluster's network for this node; its
// CIDRs and domain feed the pod-CIDR trust, the address detection, and the
// apiserver SANs. BeforeCerts receives the resolved node IP choice before any
// certificate is issued, so a caller can refuse a move or pin the address
// into its node state first.
type NodeAssembly struct {
	// HostDirs creates the directory layout (host.Dirs).
	HostDirs func() error
	// Prereqs checks the host prerequisites for the settings in use
	// (host.Prereqs).
	Prereqs func(host.PrereqOptions) error
	// ResolveNet resolves the cluster's network for this node: the
	// controller's netconfig resolution, the join's shared-cert download and
	// cluster gates. Every one of them can refuse.
	ResolveNet func() (netcfg.Config, error)
	// TrustPodCIDRs opens the host firewall for the pod interfaces
	// (host.TrustPodCIDRs).
	TrustPodCIDRs func(podCIDR string)
	// ResolveNodeIP picks this node's address, falling back to detection
	// (host.ResolveNodeIP, host.DetectNodeIPs).
	ResolveNodeIP func(flag, config, state string, detect func() (string, error)) (host.NodeIPChoice, error)
	DetectNodeIPs func(dualStack bool) (string, error)
	// BeforeCerts runs between the resolved node IP and the certificates: the
	// controller's IP-move refusal and node-state completion, the join's
	// node-IP capture.
	BeforeCerts func(choice host.NodeIPChoice) error
	// IssueCerts mints this node's leaves from the shared CAs (pki.GenerateAll).
	IssueCerts func(host, nodeIP string, sans *pki.APISANs) error
	// WriteKubeconfigs writes the node's kubeconfigs (kubeconfig.GenerateAll).
	WriteKubeconfigs func(host, server string, vip bool) error
	// WriteProfileConfigs writes the config files the node's profile declares
	// and its apiserver flags reference (profilefiles.Write).
	// Runs only for a node with a profile, and before everything that
	// follows: it can refuse.
	WriteProfileConfigs func() error
	// BeforeRuntimeConfigs runs between the profile step and the runtime configs.
	// Nil runs nothing there; the join puts its retained-data re-check, etcd
	// probe, and intent reconciliation in it, so they still refuse before
	// anything that follows.
	BeforeRuntimeConfigs func() error
	// WriteRuntimeConfigs writes the kubelet and containerd configs
	// (runtime.PrepareNodeConfigs) on the request's node state.
	WriteRuntimeConfigs func(st *nodestate.NodeState) error
}

// AssembleNode runs the common node steps of controller bootstrap and
// control-plane join, in the order both paths' guards pin: host directories,
// prerequisites, the caller's network resolution, pod-CIDR trust, node-IP
// resolution, the caller's before-certificates hook, certificates,
// kubeconfigs, the profile step (a node with a profile only), the caller's
// before-runtime-configs hook, and the runtime configs on the caller's node
// state. Every fallible step returns before the steps that follow, and a
// hook's error is the error reported, so a caller's refusal text survives the
// shared assembly. The resolved node IP choice is returned for the caller's
// own use.
func AssembleNode(a NodeAssembly, req AssembleRequest) (host.NodeIPChoice, error) {
	return AssembleNodeContext(context.Background(), a, req)
}

// AssembleNodeContext stops between preparation steps when ctx ends. A step
// already in flight finishes and retains its own error; cancellation prevents
// the next step from starting, including mutations of local files or
// firewall.
func AssembleNodeContext(ctx context.Context, a NodeAssembly, req AssembleRequest) (host.NodeIPChoice, error) {
	var none host.NodeIPChoice
	if err := a.check(); err != nil {
		return none, err
	}
	step := func(name string) error {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("node assembly stopped before %s: %w", name, err)
		}
		return nil
	}
	if err := step("host directories"); err != nil {
		return none, err
	}
	if err := a.HostDirs(); err != nil {
		return none, fmt.Errorf("create host directories: %w", err)
	}
	if err := step("prerequisites"); err != nil {
		return none, err
	}
	if err := a.Prereqs(req.PrereqOptions); err != nil {
		return none, err
	}
	if err := step("network resolution"); err != nil {
		return none, err
	}
	netc, err := a.ResolveNet()
	if err != nil {
		return none, err
	}
	if err := step("pod-CIDR trust"); err != nil {
		return none, err
	}
	a.TrustPodCIDRs(netc.PodCIDR)
	if err := step("node-IP resolution"); err != nil {
		return none, err
	}
	choice, err := a.ResolveNodeIP(req.NodeIPFlag, req.ConfigNodeIP, req.SavedIP, func() (string, error) {
		return a.DetectNodeIPs(netc.DualStack())
	})
	if err != nil {
		return none, err
	}
	if err := step("the before-certificates hook"); err != nil {
		return choice, err
	}
	if a.BeforeCerts != nil {
		if err := a.BeforeCerts(choice); err != nil {
			return choice, err
		}
	}
	if err := step("certificates"); err != nil {
		return choice, err
	}
	sans, err := apiSANs(req.vip(), netc)
	if err != nil {
		return choice, err
	}
	// A dual-stack choice is "v4,v6"; the certificate's primary address is the first.
	primary := strings.SplitN(choice.IP, ",", 2)[0]
	if err := a.IssueCerts(req.Hostname, primary, sans); err != nil {
		return choice, fmt.Errorf("issue this node's certificates: %w", err)
	}
	if err := step("kubeconfigs"); err != nil {
		return choice, err
	}
	if err := a.WriteKubeconfigs(req.Hostname, req.APIServer, req.vip() != ""); err != nil {
		return choice, fmt.Errorf("write this node's kubeconfigs: %w", err)
	}
	if req.PrereqOptions.Profile != "" {
		if err := step("profile configs"); err != nil {
			return choice, err
		}
		if a.WriteProfileConfigs != nil {
			if err := a.WriteProfileConfigs(); err != nil {
				return choice, err
			}
		}
	}
	if err := step("the before-runtime-configs hook"); err != nil {
		return choice, err
	}
	if a.BeforeRuntimeConfigs != nil {
		if err := a.BeforeRuntimeConfigs(); err != nil {
			return choice, err
		}
	}
	if err := step("runtime configs"); err != nil {
		return choice, err
	}
	if err := a.WriteRuntimeConfigs(req.State); err != nil {
		return choice, fmt.Errorf("write runtime configs: %w", err)
	}
	return choice, nil
}

// vip is the cluster VIP the certificates must cover: the request's, or,
// when it names none, the one the network resolution recorded in the node
// state (a join learns the cluster's VIP from the shared-certificate bundle,
// after the request was built). A control plane whose apiserver certificate
// lacks the VIP fails every client the first time it holds the VIP.
func (req AssembleRequest) vip() string {
	if req.VIPAddress == "" && req.State != nil {
		return req.State.VIP.Address
	}
	return req.VIPAddress
}

// check refuses an assembly missing a required effect, before any step runs.
func (a NodeAssembly) check() error {
	var missing []string
	for name, set := range map[string]bool{
		"HostDirs": a.HostDirs != nil, "Prereqs": a.Prereqs != nil, "ResolveNet": a.ResolveNet != nil,
		"TrustPodCIDRs": a.TrustPodCIDRs != nil, "ResolveNodeIP": a.ResolveNodeIP != nil,
		"DetectNodeIPs": a.DetectNodeIPs != nil, "IssueCerts": a.IssueCerts != nil,
		"WriteKubeconfigs": a.WriteKubeconfigs != nil, "WriteRuntimeConfigs": a.WriteRuntimeConfigs != nil,
	} {
		if !set {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("node assembly is missing effects %v; nothing was run", missing)
	}
	return nil
}

// apiSANs are the apiserver certificate's extra addresses: the VIP, so
// clients through it verify, and the kubernetes Service's ClusterIP.
func apiSANs(vip string, netc netcfg.Config) (*pki.APISANs, error) {
	sans := &pki.APISANs{}
	if vip != "" {
		ip := net.ParseIP(vip)
		if ip == nil {
			return nil, fmt.Errorf("cluster VIP %q is not an IP address", vip)
		}
		sans.IPs = append(sans.IPs, ip)
	}
	if netc.ServiceCIDR != "" {
		svc, err := netc.FirstServiceIP()
		if err != nil {
			return nil, err
		}
		sans.IPs = append(sans.IPs, net.IP(svc.AsSlice()))
	}
	if netc.ClusterDomain != "" {
		sans.DNSNames = append(sans.DNSNames, "kubernetes.default.svc."+netc.ClusterDomain)
	}
	return sans, nil
}
