package ha

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"strings"
	"time"

	"stratum.dev/stratum/internal/addons"
	"stratum.dev/stratum/internal/controlplane"
	"stratum.dev/stratum/internal/discovery"
	"stratum.dev/stratum/internal/host"
	"stratum.dev/stratum/internal/netcfg"
	"stratum.dev/stratum/internal/nodelock"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/pki"
	"stratum.dev/stratum/internal/version"
)

// BootstrapOptions are `stratum up`'s settings for the first control plane of
// a new cluster. On a node that already has state `up` starts what the state
// records: a network, profile or node IP given that differs from it is
// refused (refuseChangedOptions), the same one passes.
type BootstrapOptions struct {
	NodeIP, ConfigNodeIP string
	VIP                  nodestate.VIP
	PodCIDR, ServiceCIDR string
	ClusterDomain        string
	Cilium               addons.CiliumSettings
	Profile              string
	SELinuxOptOut        bool
	// EtcdQuota is the etcd member's quota in bytes (spec.etcd.quota,
	// --etcd-quota; controlplane.CheckEtcdQuota), 0 for etcd's default of
	// 2 GiB. Joins
	// take the cluster's.
	EtcdQuota int64
}

// Checkpoints of a first control plane's bootstrap, in order; the start's
// (StartCheckpoints) and CheckpointUpAfterPublish follow them. A crash at any
// of them leaves a node that `stratum up` run again brings to a cluster a
// joiner can join.
const (
	// CheckpointUpStart: refusals passed, locks held, nothing written.
	CheckpointUpStart = "up-start"
	// CheckpointUpAfterCAs: the cluster's CAs are on disk.
	CheckpointUpAfterCAs = "up-after-cas"
	// CheckpointUpAfterAssembly: leaves, kubeconfigs and configs are on disk.
	CheckpointUpAfterAssembly = "up-after-assembly"
	// CheckpointUpAfterStateSave: the node state is saved; nothing started.
	CheckpointUpAfterStateSave = "up-after-state-save"
	// CheckpointUpAfterPublish: cluster-info and the joiners' grant are
	// published.
	CheckpointUpAfterPublish = "up-after-publish"
)

// UpCheckpoints are every checkpoint a first `stratum up` reaches, in order.
var UpCheckpoints = append(append([]string{CheckpointUpStart, CheckpointUpAfterCAs, CheckpointUpAfterAssembly, CheckpointUpAfterStateSave},
	StartCheckpoints...), CheckpointUpAfterPublish)

// Up is `stratum up`: on a node with saved control-plane state it starts that
// control plane (StartControlPlane); on a node with a surviving join intent
// it refuses (ErrIntentSurvives); on a fresh node it bootstraps the first
// control plane of a new cluster: the cluster's CAs, this node's leaves and
// kubeconfigs, a single-member etcd, the apiserver, kube-vip. Every run that
// starts a control plane then publishes, idempotently, what a joiner needs
// (cluster-info with the CA, the certs-reader grant and its fence policy),
// so a first run that failed after saving its state is finished by the next.
// On a node that had saved state that publication is best effort: its
// failure is a warning, never a reason to stop the control plane it started
// (etcd refusing writes under a NOSPACE alarm, an admission webhook whose
// pods are down: a supervisor under systemd tore down a serving control
// plane, restarted it and tore it down again, for as long as writes failed).
func (n *Node) Up(ctx context.Context, o BootstrapOptions) (*nodestate.NodeState, error) {
	h := n.env.Host
	if err := n.refuseResetUnderWay("stratum up"); err != nil {
		return nil, err
	}
	_, err := nodestate.Load(h)
	switch {
	case err == nil:
		return n.restart(ctx, o, "stratum up (starting this node's control plane; one that keeps failing under systemd stops with `systemctl stop stratum`)")
	case !errors.Is(err, nodestate.ErrNoState):
		return nil, Refusal(err)
	}
	if err := n.refuseSurvivingIntent(ctx); err != nil {
		return nil, err
	}
	st, err := n.bootstrap(ctx, o)
	if err != nil {
		return st, err
	}
	if err := n.publishForJoiners(ctx, st, publishForJoinersWithin); err != nil {
		return st, err
	}
	return st, n.checkpoint(ctx, CheckpointUpAfterPublish)
}

// Restart is Up with o on a node with saved control-plane state, and never
// a bootstrap: a node whose state is gone (a reset that ran meanwhile) is
// refused, matching nodestate.ErrNoState. The supervisor retries a start
// with it (a failed one while it keeps a voter's etcd running, one refused
// for missing etcd data once the data is back), holding the node's locks as
// holder (RetriedStartHolder, WaitedStartHolder): Up there could bootstrap a
// new cluster on a machine just reset. o is the command's own, so a
// `stratum up --vip` that waited still adopts its VIP.
func (n *Node) Restart(ctx context.Context, o BootstrapOptions, holder string) (*nodestate.NodeState, error) {
	if err := n.refuseResetUnderWay("stratum up"); err != nil {
		return nil, err
	}
	return n.restart(ctx, o, holder)
}

// RetriedStartHolder is how the node's locks name a Restart to an
// operation that finds them held: the supervisor's retried start, which
// keeps this node's etcd voter running and holds the locks for each attempt
// (up to minutes, seconds apart). It is marked nodelock.YieldMark, so the
// operation waits for the attempt to end and runs between attempts, rather
// than being refused nearly every time it is run (and never made room for by
// stopping the supervisor, which would stop that voter).
const RetriedStartHolder = nodelock.YieldMark + "the supervisor's retried start of this control plane (it keeps this node's etcd voter running and tries again every few seconds; stopping the supervisor would stop that voter)"

// WaitedStartHolder names a Restart of a supervisor that waited for its
// missing etcd data to the operation refused meanwhile: the start runs
// once, when the data is back, so the command is to be run again after it.
const WaitedStartHolder = "the supervisor's start of this control plane, now that its etcd data is back (run the refused command again once it is done)"

// restart is Up on a node with saved state: under the node's locks, as
// every other operation on it takes them (a restore or a reset begun
// meanwhile is refused instead of replacing the data under the etcd this
// starts), the refusals, the VIP's adoption, the start, and what joiners
// need published again, a failure there being a warning.
func (n *Node) restart(ctx context.Context, o BootstrapOptions, holder string) (*nodestate.NodeState, error) {
	h := n.env.Host
	release, lerr := nodelock.AcquireBoth(h, holder)
	if lerr != nil {
		return nil, Refusal(lerr)
	}
	defer release()
	if err := n.refuseDataReplaceUnderWay("stratum up"); err != nil {
		return nil, err
	}
	saved, err := nodestate.Load(h) // as it is under the locks
	if err != nil {
		return nil, Refusal(err)
	}
	if err := refuseChangedOptions(saved, o); err != nil {
		return nil, err
	}
	if err := refuseMovedNodeIP(h, saved); err != nil {
		return nil, err
	}
	if err := RefuseMissingEtcdData(h, saved); err != nil { // before the VIP is recorded
		return nil, err
	}
	if err := n.adoptVIP(ctx, saved, o.VIP); err != nil {
		return saved, err
	}
	n.warnQuotaNotUsed(saved, o.EtcdQuota)
	st, err := n.StartControlPlane(ctx)
	if err != nil {
		return st, err
	}
	if err := n.publishForJoiners(ctx, st, republishForJoinersWithin); err != nil {
		n.log.Warn("what joiners need was not published again; the control plane runs", "err", err)
		if n.env.Progress != nil {
			n.env.Progress(fmt.Sprintf("warning: %v; the control plane runs, and joins use what was published before", err))
		}
	}
	return st, n.checkpoint(ctx, CheckpointUpAfterPublish)
}

// refuseChangedOptions refuses a start from saved state given a network or
// profile (by flag or --config), or a --node-ip, other than the ones this control
// plane was brought up with: the start uses none of them, and taking the
// command without a word left, say, `stratum up --profile cis` running
// without the profile. The network is the cluster's, and a profile is laid
// out at the bring-up; a value equal to the saved one passes (a script that
// runs the same `stratum up` at every boot). The VIP and the etcd quota have
// their own rules (adoptVIP, warnQuotaNotUsed).
func refuseChangedOptions(saved *nodestate.NodeState, o BootstrapOptions) error {
	was := netcfg.Config{PodCIDR: saved.PodCIDR, ServiceCIDR: saved.ServiceCIDR, ClusterDomain: saved.ClusterDomain}.WithDefaults()
	var changed []string
	differs := func(what, given, saved string) {
		if given != "" && given != saved {
			changed = append(changed, fmt.Sprintf("%s %s (this control plane has %s)", what, given, cmp.Or(saved, "none")))
		}
	}
	differs("pod CIDR", o.PodCIDR, was.PodCIDR)
	differs("service CIDR", o.ServiceCIDR, was.ServiceCIDR)
	differs("cluster domain", o.ClusterDomain, was.ClusterDomain)
	differs("profile", o.Profile, saved.Profile)
	// A --config's nodeIP yields to the saved one (host.ResolveNodeIP's
	// precedence); --node-ip does not.
	if o.NodeIP != nodestate.FirstIP(saved.NodeIP) {
		differs("node IP", o.NodeIP, saved.NodeIP)
	}
	if len(changed) == 0 {
		return nil
	}
	return Refusal(fmt.Errorf("stratum up refused: this node already has a control plane, which starts as it was brought up, and these cannot change: %s; nothing was changed: run `stratum up` without them (or with the values it has); a cluster's network is set at its bring-up, and a profile or node IP by a reset and a join", strings.Join(changed, "; ")))
}

// refuseMovedNodeIP refuses to start a control plane whose recorded node IP
// is not an address of this host (a DHCP lease that changed, a machine
// re-addressed): its etcd would fail to bind its peer and client URLs on
// every try, its supervisor exiting 1 after seconds as if a re-run would
// help, while the certificates, the cluster's published members and the
// other members' peer lists all name the recorded address, so the control
// plane cannot move. The refusal names the address and both ways out.
func refuseMovedNodeIP(h host.Host, st *nodestate.NodeState) error {
	if err := nodeIPGone(h, st.NodeIP); err != nil {
		return Refusal(fmt.Errorf("stratum up refused: node IP %s, which this control plane's node state %s records: %w; nothing was changed, and etcd was not started: its member, its certificates and the cluster's member list name that address, so a control plane does not move to another. If the address comes back (a network not yet up, a lease renewed), run `stratum up` again once it has; on a cluster's only control plane, give the machine that address again (a static address, or a DHCP reservation): a reset there ends the cluster. If another control plane runs and this machine's address changed for good, run `stratum reset` here and join it again with the command `stratum token create --control-plane` prints on a running control plane", st.NodeIP, nodestate.Path, err))
	}
	return nil
}

// How long publishForJoiners retries: at a bootstrap, while the new
// apiserver's bootstrap settles; at a restart, briefly, since what it
// publishes is there from the node's bring-up.
const (
	publishForJoinersWithin   = time.Minute
	republishForJoinersWithin = 10 * time.Second
)

// CheckVIP refuses a VIP that is not an IPv4 address. The VIP is held by
// adding it to an interface and announcing it by gratuitous ARP, which is
// IPv4 only: an IPv6 VIP would never be reachable, with every control plane
// taking and dropping it in a loop. A dual-stack cluster's VIP is its IPv4
// one. No address that names no one host is one either: 0.0.0.0 (a dial to
// it reaches the dialer's own apiserver, so a single control plane took it
// for a VIP that served), the limited broadcast and multicast addresses.
// Loopback addresses stay: the simulator's hosts live on 127.0.0.0/8.
func CheckVIP(addr string) error {
	ip, err := netip.ParseAddr(addr)
	switch {
	case err != nil:
		return fmt.Errorf("the VIP %q is not an IP address", addr)
	case !ip.Is4(): // an IPv4-mapped IPv6 form too: the announcer takes only the plain one
		return fmt.Errorf("the VIP %s is not an IPv4 address: stratum announces its VIP by ARP, which is IPv4 only (a dual-stack cluster's VIP is an IPv4 address)", addr)
	case ip.IsUnspecified(), ip == netip.AddrFrom4([4]byte{255, 255, 255, 255}), ip.IsMulticast():
		return fmt.Errorf("the VIP %s names no single host (an unspecified, broadcast or multicast address): give an unused address of the control planes' subnet", addr)
	}
	return nil
}

// adoptVIP records vip in the saved state of a control plane that has none:
// `stratum up --vip` on a single control plane growing into HA. The start
// that follows reissues its apiserver certificate to cover the VIP before
// kube-vip can take it. A different VIP than the recorded one is refused:
// every node's certificates and kubeconfigs name the recorded one.
func (n *Node) adoptVIP(ctx context.Context, st *nodestate.NodeState, vip nodestate.VIP) error {
	if vip.Address == "" || vip.Address == st.VIP.Address {
		return nil
	}
	switch bad := CheckVIP(vip.Address); {
	case st.VIP.Address != "":
		return Refusal(fmt.Errorf("stratum up refused: this cluster's VIP is %s, not %s; nothing was changed: run `stratum up` without --vip", st.VIP.Address, vip.Address))
	case bad != nil:
		return Refusal(fmt.Errorf("stratum up refused: %w; nothing was changed", bad))
	case vip.Address == st.NodeIP:
		return Refusal(fmt.Errorf("stratum up refused: the VIP %s is this node's own address; nothing was changed", vip.Address))
	}
	if err := (netcfg.Config{PodCIDR: st.PodCIDR, ServiceCIDR: st.ServiceCIDR}).WithDefaults().CheckOutsideRanges("VIP", vip.Address, false); err != nil {
		return Refusal(fmt.Errorf("stratum up refused: %w; nothing was changed", err))
	}
	caPEM, err := n.env.Host.ReadFile(version.PKIFile(pki.CACertFile))
	if err != nil {
		return Refusal(fmt.Errorf("stratum up refused: read the cluster CA to judge who answers on the VIP %s: %w; nothing was changed", vip.Address, err))
	}
	if err := n.refuseVIPServedElsewhere(ctx, vip.Address, caPEM); err != nil {
		return Refusal(fmt.Errorf("stratum up refused: %w; nothing was changed", err))
	}
	st.VIP = vip
	if err := nodestate.Save(n.env.Host, st); err != nil {
		return fmt.Errorf("stratum up: record the VIP %s: %w; nothing else was changed", vip.Address, err)
	}
	n.log.Info("the VIP is recorded for this control plane; its certificate is reissued to cover it at start", "vip", vip.Address)
	return nil
}

// bootstrapRun is a first control plane's bootstrap in flight.
type bootstrapRun struct {
	n       *Node
	o       BootstrapOptions
	netc    netcfg.Config
	release func()
	shared  *pki.Shared
	st      *nodestate.NodeState
	// nodeIPs is the node IP the refusals resolved ("v4,v6" dual-stack).
	nodeIPs string
}

// bootstrapSteps are a bootstrap's steps in checkpoint order: refusals
// first, then each write, each re-run safe (the CAs are made once and kept).
var bootstrapSteps = []struct {
	name, checkpoint string
	run              func(*bootstrapRun, context.Context) error
}{
	{"refusals", CheckpointUpStart, (*bootstrapRun).refuse},
	{"cluster CAs", CheckpointUpAfterCAs, (*bootstrapRun).makeCAs},
	{"node assembly", CheckpointUpAfterAssembly, (*bootstrapRun).assemble},
	{"node state", CheckpointUpAfterStateSave, (*bootstrapRun).saveState},
}

func (n *Node) bootstrap(ctx context.Context, o BootstrapOptions) (*nodestate.NodeState, error) {
	r := &bootstrapRun{n: n, o: o}
	defer func() {
		if r.release != nil {
			r.release()
		}
	}()
	for i, s := range bootstrapSteps {
		n.log.Debug("bootstrap step", "step", s.name)
		began := time.Now()
		if err := s.run(r, ctx); err != nil {
			if i == 0 { // the refusals: nothing written yet
				err = Refusal(err)
			}
			return nil, err
		}
		n.stepDone(s.name, time.Since(began))
		if err := n.checkpoint(ctx, s.checkpoint); err != nil {
			return nil, err
		}
	}
	// The start under the locks the bring-up took (released by the defer),
	// as every later start (restart) runs: a repoint, a restore or a reset
	// begun meanwhile is refused instead of racing its writes.
	st, err := n.StartControlPlane(ctx)
	if err != nil {
		// Whatever the start refused: the node is laid out.
		return nil, Midway(fmt.Errorf("%w. The bring-up before this start set up the node (its cluster CAs, certificates and node state written): fix the cause and run `stratum up` again, which starts it from the saved state", err))
	}
	return st, nil
}

// refuse checks the options, takes the node's locks and refuses a node with
// retained etcd data.
func (r *bootstrapRun) refuse(ctx context.Context) error {
	h, o := r.n.env.Host, r.o
	r.netc = netcfg.Config{PodCIDR: o.PodCIDR, ServiceCIDR: o.ServiceCIDR, ClusterDomain: o.ClusterDomain}.WithDefaults()
	if err := r.netc.Validate(); err != nil {
		return fmt.Errorf("stratum up refused: %w; nothing was changed", err)
	}
	if o.VIP.Address != "" {
		if err := CheckVIP(o.VIP.Address); err != nil {
			return fmt.Errorf("stratum up refused: %w; nothing was changed", err)
		}
	}
	if problems := host.ProfileProblems(o.Profile, o.SELinuxOptOut); len(problems) > 0 {
		return fmt.Errorf("stratum up refused: %w: %s; nothing was changed", host.ErrPrereq, strings.Join(problems, "; "))
	}
	if err := controlplane.CheckEtcdQuota(o.EtcdQuota); err != nil {
		return fmt.Errorf("stratum up refused: %w; nothing was changed", err)
	}
	// The node IP is resolved here, before the CAs are made, as the
	// assembly will resolve it: an explicit one must be this host's (a
	// detected one is by construction), a host with none to detect is
	// refused, and neither may be the VIP.
	c, err := host.ResolveNodeIP(o.NodeIP, o.ConfigNodeIP, "", func() (string, error) { return host.DetectNodeIPs(h, r.netc.DualStack()) })
	if err != nil {
		return fmt.Errorf("stratum up refused: %w; nothing was changed", err)
	}
	ip := strings.SplitN(c.IP, ",", 2)[0]
	if c.Source != "detected" {
		if err := checkLocalIP(h, ip); err != nil {
			return fmt.Errorf("stratum up refused: node IP %s (from %s): %w; nothing was changed: pass --node-ip with an address of this host", ip, c.Source, err)
		}
	}
	if err := r.netc.CheckNodeIP(ip, true); err != nil {
		return fmt.Errorf("stratum up refused: %w; nothing was changed", err)
	}
	if err := checkOutsideRanges(r.netc, c.IP, o.VIP.Address, true); err != nil {
		return fmt.Errorf("stratum up refused: %w; nothing was changed", err)
	}
	r.nodeIPs = c.IP
	if o.VIP.Address != "" && o.VIP.Address == ip {
		return fmt.Errorf("stratum up refused: the VIP %s is this node's own address (from %s); nothing was changed: pick an unused address on the node's network for --vip", o.VIP.Address, c.Source)
	}
	if o.VIP.Address != "" {
		if err := r.n.refuseVIPServedElsewhere(ctx, o.VIP.Address, nil); err != nil {
			return fmt.Errorf("stratum up refused: %w; nothing was changed", err)
		}
	}
	release, err := nodelock.AcquireBoth(h, "stratum up (bootstrap)", r.n.lockOptions(ctx)...)
	if err != nil {
		return err
	}
	r.release = release
	// Judged again under the locks: a join begun since Up looked.
	if err := r.n.refuseSurvivingIntent(ctx); err != nil {
		return err
	}
	if err := refuseUnfinishedJoin(h); err != nil {
		return err
	}
	entries, err := etcdDataEntries(h)
	switch {
	case err == nil && len(entries) > 0:
		return fmt.Errorf("%w in %s but no node state; nothing was changed: this node was a member of some cluster, and a bootstrap does not use that data: remove what it holds to bootstrap a new cluster here (keep a copy first if that cluster's data may still be needed; a snapshot of it restores on a control plane with `stratum snapshot restore`)", ErrRetainedData, version.EtcdDataDir)
	case err != nil:
		return fmt.Errorf("%w? %s cannot be read (%v); nothing was changed: make it readable, or remove it", ErrRetainedData, version.EtcdDataDir, err)
	}
	return nil
}

// checkOutsideRanges refuses a node IP (each of a dual-stack "v4,v6") or
// a VIP inside the cluster's pod or service range
// (netcfg.Config.CheckOutsideRanges).
func checkOutsideRanges(netc netcfg.Config, nodeIPs, vip string, rangeChosenHere bool) error {
	for _, ip := range strings.Split(nodeIPs, ",") {
		if ip = strings.TrimSpace(ip); ip == "" {
			continue
		}
		if err := netc.CheckOutsideRanges("node IP", ip, rangeChosenHere); err != nil {
			return err
		}
	}
	if vip != "" {
		return netc.CheckOutsideRanges("VIP", vip, rangeChosenHere)
	}
	return nil
}

// keptOutOfPodTrust are the addresses whose pod range is not trusted in the
// firewall (host.TrustPodCIDRs): the node's own (each of a dual-stack
// "v4,v6") and its VIP.
func keptOutOfPodTrust(nodeIPs, vip string) []string {
	out := strings.Split(nodeIPs, ",")
	if vip != "" {
		out = append(out, vip)
	}
	return out
}

// refuseUnfinishedJoin refuses a bootstrap on a node that holds a join's
// bootstrap kubeconfig without node state or intent journal: a `stratum
// server` killed (or whose machine lost power) between its discovery and its
// journal, which left the cluster's downloaded CAs and keys behind. A
// bootstrap would take those CAs for its own (a complete set is reused) and
// start a second, empty cluster under them: an apiserver every client of
// the real cluster trusts, and with a VIP, a contender for the real
// cluster's. Only a join writes bootstrap.conf; a reset removes it.
func refuseUnfinishedJoin(h host.Host) error {
	p := version.Kubeconfig("bootstrap")
	_, err := h.ReadFile(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("stratum up refused: %s cannot be read (%v); nothing was changed: make it readable, or remove it if this node never joined a cluster", p, err)
	}
	return fmt.Errorf("stratum up refused: this node holds %s, a control-plane join's bootstrap kubeconfig, but no node state: a `stratum server` join stopped before it saved its state (killed, or the machine lost power), or a joined control plane lost its node state (a replaced disk), leaving the cluster's certificates a join downloaded. A bootstrap here would start a second cluster under that cluster's CAs. Nothing was changed: run the same join command again, which finishes the join, or `stratum reset --force` to clear this node before bootstrapping a new cluster on it", p)
}

// makeCAs makes the cluster's CAs once: a re-run after a crash keeps the
// ones it already wrote, so the leaves and kubeconfigs it wrote stay valid.
func (r *bootstrapRun) makeCAs(context.Context) error {
	shared, err := r.n.loadOrMakeShared()
	r.shared = shared
	return err
}

// assemble is the shared node assembly on the bootstrap's own network.
func (r *bootstrapRun) assemble(ctx context.Context) error {
	n, h, o := r.n, r.n.env.Host, r.o
	name := h.Name()
	st := &nodestate.NodeState{Role: nodestate.RoleControlPlane, NodeName: name, VIP: o.VIP,
		PodCIDR: r.netc.PodCIDR, ServiceCIDR: r.netc.ServiceCIDR, ClusterDomain: r.netc.ClusterDomain, Cilium: o.Cilium, Profile: o.Profile}
	r.st = st
	_, err := AssembleNodeContext(ctx, NodeAssembly{
		HostDirs:      func() error { return host.Dirs(h) },
		Prereqs:       func(po host.PrereqOptions) error { return host.Prereqs(h, po) },
		ResolveNet:    func() (netcfg.Config, error) { return r.netc, nil },
		TrustPodCIDRs: func(c string) { _ = host.TrustPodCIDRs(h, c, keptOutOfPodTrust(r.nodeIPs, o.VIP.Address)...) },
		ResolveNodeIP: host.ResolveNodeIP,
		DetectNodeIPs: func(dual bool) (string, error) { return host.DetectNodeIPs(h, dual) },
		BeforeCerts: func(c host.NodeIPChoice) error {
			st.NodeIP = strings.SplitN(c.IP, ",", 2)[0]
			if err := checkLocalIP(h, st.NodeIP); err != nil {
				return fmt.Errorf("stratum up refused: node IP %s (from %s): %w; nothing was changed: pass --node-ip with an address of this host", st.NodeIP, c.Source, err)
			}
			if o.VIP.Address != "" && o.VIP.Address == st.NodeIP {
				return fmt.Errorf("stratum up refused: the VIP %s is this node's own address; nothing was changed: pick an unused address on the node's network for --vip", o.VIP.Address)
			}
			st.Server = apiServerURL(st.NodeIP)
			if o.VIP.Address != "" {
				st.Server = apiServerURL(o.VIP.Address)
			}
			return nil
		},
		IssueCerts: func(hostname, ip string, sans *pki.APISANs) error {
			return n.issueLeavesFrom(r.shared, hostname, ip, sans)
		},
		WriteKubeconfigs:    func(_, _ string, _ bool) error { return n.writeKubeconfigs(st.Server) },
		WriteProfileConfigs: func() error { return writeProfileConfigs(h, o.Profile) },
		WriteRuntimeConfigs: func(st *nodestate.NodeState) error { return writeRuntimeConfigs(h, st) },
	}, AssembleRequest{Hostname: name, NodeIPFlag: o.NodeIP, ConfigNodeIP: o.ConfigNodeIP, VIPAddress: o.VIP.Address,
		PrereqOptions: host.PrereqOptions{Profile: o.Profile, SELinuxOptOut: o.SELinuxOptOut}, State: st})
	return err
}

// saveState records the single-member etcd the node starts as.
func (r *bootstrapRun) saveState(context.Context) error {
	st := r.st
	peerURL := "https://" + net.JoinHostPort(st.NodeIP, fmt.Sprint(version.EtcdPeerPort))
	st.Etcd = nodestate.Etcd{Name: st.NodeName, PeerURL: peerURL, ClientURL: EtcdEndpoint(st.NodeIP),
		InitialCluster: st.NodeName + "=" + peerURL, InitialClusterState: "new", QuotaBackendBytes: r.o.EtcdQuota}
	return nodestate.Save(r.n.env.Host, st)
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
	return n.writeLeaves(leaves)
}

// writeLeaves writes leaf files by name into the PKI directory, keys 0600.
func (n *Node) writeLeaves(leaves map[string][]byte) error {
	h := n.env.Host
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
// minted: the CA in cluster-info, the certs-reader grant and its fence
// policy. Idempotent: every `stratum up` runs it, through this node's own
// kube-apiserver, just started (ownAdminRESTConfig: not the VIP, which its
// candidate, started a moment before, may not hold yet).
func (n *Node) publishForJoiners(ctx context.Context, st *nodestate.NodeState, within time.Duration) error {
	caPEM, err := n.env.Host.ReadFile(version.PKIFile("ca.crt"))
	if err != nil {
		return fmt.Errorf("publish cluster-info for joiners: read the cluster CA: %w", err)
	}
	cs, err := n.ownAdminClient(st.NodeIP)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(within)
	for {
		err = discovery.Publish(ctx, cs, st.Server, caPEM)
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		select { // the apiserver's RBAC bootstrap may still be settling
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	if err != nil {
		return fmt.Errorf("publish cluster-info for joiners: %w (after %s); the control plane runs: re-run `stratum up` to retry", err, within)
	}
	if err := n.GrantCertsReader(ctx, cs); err != nil {
		return fmt.Errorf("grant joiners read access to the shared certificates: %w; the control plane runs: re-run `stratum up` to retry", err)
	}
	return nil
}
