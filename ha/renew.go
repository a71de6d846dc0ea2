package ha

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"slices"
	"sort"
	"strings"
	"time"

	"stratum.dev/stratum/internal/host"
	"stratum.dev/stratum/internal/interrupt"
	"stratum.dev/stratum/internal/kubeconfig"
	"stratum.dev/stratum/internal/netcfg"
	"stratum.dev/stratum/internal/nodelock"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/pki"
	"stratum.dev/stratum/internal/version"
)

// Checkpoints of a certificate renewal (RenewCerts), in order. A crash at
// either, or between two of its writes, leaves leaves that each chain to the
// cluster's CAs and pair with their keys; a re-run issues them all again and
// restarts the consumers.
const (
	// CheckpointRenewAfterLeaves: this node's leaf certificates are reissued.
	CheckpointRenewAfterLeaves = "renew-after-leaves"
	// CheckpointRenewAfterKubeconfigs: its kubeconfigs are reissued; no
	// service has been restarted.
	CheckpointRenewAfterKubeconfigs = "renew-after-kubeconfigs"
)

// RenewCheckpoints are a renewal's checkpoints in order.
var RenewCheckpoints = []string{CheckpointRenewAfterLeaves, CheckpointRenewAfterKubeconfigs}

// renewRestartOrder is the order a renewal restarts the services the VIP's
// handover brackets: etcd first (its serving and peer certificates), then
// the apiserver that talks to it. What talks to the apiserver (the VIP
// candidate, the operator) follows (restartOntoRenewed).
var renewRestartOrder = []string{ServiceEtcd, ServiceAPIServer}

// RenewCerts is `stratum certs renew`: it reissues this control plane's leaf
// certificates (apiserver, etcd server, peer and clients, front-proxy client)
// and its kubeconfigs from the cluster's CAs on this node, each valid for a
// year from now, with the same names and addresses (the VIP included), then
// restarts the services that run so they serve and present the new ones. The
// CAs are not touched, and each leaf keeps its key (as kubeadm's renewal
// does): only a key missing or unparsable is made anew, so a renewal stopped
// between two writes never leaves a certificate over another key, which
// etcd or the apiserver would not start on. It holds the node's maintenance
// lock; refusals (not a control plane, a CA missing, the lock held, a
// cluster that could not lose this node's etcd member for its restart:
// refuseRenewOnUnhealthyCluster) come before anything is written. It returns
// the files it wrote and the services it restarted.
func (n *Node) RenewCerts(ctx context.Context) (written, restarted []string, err error) {
	var changed bool
	defer refuseUntilChanged(&err, &changed)
	h := n.env.Host
	// The lock before the node state is read: the names and addresses the
	// leaves cover, and the server the kubeconfigs name, are the state's as
	// it stands under the lock, not as a repoint or a VIP adoption that ran
	// between the read and the lock left it.
	release, err := nodelock.Acquire(h, nodelock.Maintenance, "stratum certs renew", n.lockOptions(ctx)...)
	if err != nil {
		return nil, nil, err
	}
	defer release()
	st, err := nodestate.Load(h)
	if err != nil {
		return nil, nil, fmt.Errorf("certs renew: %w; nothing was changed", err)
	}
	if st.Role != nodestate.RoleControlPlane {
		return nil, nil, fmt.Errorf("certs renew: node state %s is not a control plane's; nothing was changed", nodestate.Path)
	}
	shared, err := n.loadSharedCAs()
	if err != nil {
		return nil, nil, fmt.Errorf("certs renew: %w; nothing was changed", err)
	}
	netc := netcfg.Config{PodCIDR: st.PodCIDR, ServiceCIDR: st.ServiceCIDR, ClusterDomain: st.ClusterDomain}.WithDefaults()
	sans, err := apiSANs(st.VIP.Address, netc)
	if err != nil {
		return nil, nil, fmt.Errorf("certs renew: %w; nothing was changed", err)
	}
	ip := net.ParseIP(st.NodeIP)
	if ip == nil {
		return nil, nil, fmt.Errorf("certs renew: node state %s has no usable node IP (%q); nothing was changed", nodestate.Path, st.NodeIP)
	}
	if err := n.refuseRenewOnUnhealthyCluster(ctx, st); err != nil {
		return nil, nil, err
	}
	// Named as the node state records the node, as at its bring-up: the
	// hostname now may have changed since, or be a boot's "localhost".
	certs, newKeys, err := pki.RenewNodeLeaves(shared, cmp.Or(st.NodeName, h.Name()), ip, sans, h.Now(), func(name string) ([]byte, error) {
		return h.ReadFile(version.PKIFile(name))
	})
	if err != nil {
		return nil, nil, fmt.Errorf("certs renew: issue the leaves: %w; nothing was changed", err)
	}
	for _, files := range []map[string][]byte{newKeys, certs} {
		for name := range files {
			written = append(written, version.PKIFile(name))
		}
	}
	changed = true
	// A key made anew (missing or unparsable) goes before its certificate;
	// every other certificate is over the key already on disk.
	for _, files := range []map[string][]byte{newKeys, certs} {
		if err := n.writeLeaves(files); err != nil {
			return nil, nil, fmt.Errorf("certs renew: %w; each certificate written so far pairs with its key and chains to the same CAs: re-run `stratum certs renew`", err)
		}
	}
	if err := n.checkpoint(ctx, CheckpointRenewAfterLeaves); err != nil {
		return nil, nil, err
	}
	if err := n.writeKubeconfigs(st.Server); err != nil {
		return nil, nil, fmt.Errorf("certs renew: kubeconfigs: %w; re-run `stratum certs renew`", err)
	}
	for _, name := range kubeconfig.Names() {
		written = append(written, version.Kubeconfig(name))
	}
	if err := n.checkpoint(ctx, CheckpointRenewAfterKubeconfigs); err != nil {
		return nil, nil, err
	}
	restarted, err = n.restartOntoRenewed(ctx, st.NodeIP)
	sort.Strings(written)
	return slices.Compact(written), restarted, err
}

// restartOntoRenewed restarts the services that run here onto the renewed
// files and returns those it restarted, in order: etcd and the apiserver
// (renewRestartOrder), the VIP candidate, the operator. The VIP candidate,
// when it runs, is stopped before the others, which releases the VIP's
// lease to another control plane (within its retry period, 1 s on a real host)
// instead of leaving the VIP on an apiserver that restarts for seconds; it
// is started again after the apiserver, also when a restart before failed,
// so a failed renewal never leaves this node out of the VIP's election.
// Once the apiserver on nodeIP has restarted, the renewed credentials' group
// is bound (bindClusterAdminsVia), before the VIP candidate starts again.
func (n *Node) restartOntoRenewed(ctx context.Context, nodeIP string) ([]string, error) {
	h := n.env.Host
	vipRuns, err := n.renewedServiceRuns(ctx, ServiceVIP)
	if err != nil {
		return nil, err
	}
	if vipRuns {
		// From the VIP candidate's stop to its start again, a second
		// Ctrl-C must not end the process: a re-run finds the candidate
		// stopped and leaves it so, out of the VIP's election.
		defer interrupt.Hold()()
		if n.env.Progress != nil {
			n.env.Progress("handing the VIP over before the restarts: stopping " + ServiceVIP + " here")
		}
		if err := h.StopService(ctx, ServiceVIP); err != nil {
			// The stop may have gone through (a supervisor finishes a stop
			// its caller gave up on): a re-run would find the candidate
			// stopped and leave it so, out of the VIP's election.
			stopErr := fmt.Errorf("certs renew: stop %s to hand the VIP over: %w; the certificates are renewed: re-run `stratum certs renew`", ServiceVIP, err)
			if serr := h.StartService(context.WithoutCancel(ctx), ServiceVIP); serr != nil {
				return nil, errors.Join(stopErr, fmt.Errorf("certs renew: start %s again: %w; `stratum up` starts it", ServiceVIP, serr))
			}
			return nil, stopErr
		}
	}
	var restarted []string
	restart := func(s string) error {
		runs, err := n.renewedServiceRuns(ctx, s)
		if err != nil || !runs {
			return err
		}
		if err := h.RestartService(ctx, s); err != nil {
			// A failed restart may leave the service stopped, which a re-run
			// (restarting only what runs) would leave so: said.
			if s == ServiceEtcd {
				return fmt.Errorf("certs renew: restart %s onto its renewed certificates: %w; the certificates are renewed, %s may be stopped (`stratum status` says) and %s was not restarted. If the other control planes' certificates have expired too (all issued the same day), this etcd finds no quorum with them until a second one is renewed: run `stratum certs renew` on the next control plane now (one whose own certificates have expired renews without checking the cluster's health), then on each other whose have expired. Then, here: `stratum up` if etcd is stopped (it starts on the renewed files), and `stratum certs renew` again", s, err, s, ServiceAPIServer)
			}
			return fmt.Errorf("certs renew: restart %s onto its renewed certificates: %w; the certificates are renewed, and %s may be stopped (`stratum status` says): `stratum up` starts it on the renewed files; then re-run `stratum certs renew`", s, err, s)
		}
		restarted = append(restarted, s)
		return nil
	}
	var failed, bindFailed error
	for _, s := range renewRestartOrder {
		if failed = restart(s); failed != nil {
			break
		}
	}
	if failed == nil && slices.Contains(restarted, ServiceAPIServer) {
		// The renewed admin credential and kubelet client are in the
		// bound group: a renewal by this stratum of a control plane brought
		// up before the binding binds it before the VIP's candidate, which
		// elects with that credential, starts again.
		if err := n.bindClusterAdminsVia(ctx, nodeIP); err != nil {
			bindFailed = fmt.Errorf("certs renew: %w; the certificates are renewed and the services restarted: re-run `stratum certs renew` or `stratum up`", err)
		}
	}
	if vipRuns {
		if err := h.StartService(context.WithoutCancel(ctx), ServiceVIP); err != nil {
			return restarted, errors.Join(failed, fmt.Errorf("certs renew: start %s again after handing the VIP over: %w; `stratum up` starts it", ServiceVIP, err))
		}
		restarted = append(restarted, ServiceVIP)
	}
	if failed != nil {
		return restarted, failed
	}
	return restarted, errors.Join(bindFailed, restart(serviceOperator))
}

// renewExemptingLeaves are the certificates (relative to version.PKIDir) of
// this node whose expiry exempts a renewal from the cluster's health check:
// etcd's serving and peer certificates and the apiserver's, and the etcd
// client certificate the check itself dials with.
var renewExemptingLeaves = []string{
	pki.EtcdServerLeaf + ".crt", pki.EtcdPeerLeaf + ".crt", pki.APIServerLeaf + ".crt", pki.EtcdClientLeaf + ".crt",
}

// renewUnhealthyAdvice is what a renewal refused for the cluster's health
// tells to do.
const renewUnhealthyAdvice = "heal the cluster first (`stratum etcd health` names what is wrong), or replace a member that is gone for good (removed, then a new control plane joined), then run `stratum certs renew` here again; a control plane whose own certificates have expired renews without this check"

// refuseRenewOnUnhealthyCluster refuses a renewal whose restart of this
// node's etcd could cost the cluster its quorum: with a member of three down,
// the restart leaves one voter running, no write or Lease renewal goes
// through, the VIP is dropped everywhere, and if etcd does not come back the
// cluster stays down. When this node's etcd runs and its cluster has other
// members, the cluster must be healthy apart from a NOSPACE alarm, as for
// `stratum etcd quota` (healthyButForSpace); the refusal wraps
// ErrClusterUnhealthy. No check is made when etcd does not run here (its
// start loses no vote), when it is the cluster's only member, or when one of
// this node's renewExemptingLeaves has expired: the expiry is then presumed
// to be what makes the cluster unhealthy (every control plane's expire the
// same day, a year after the bring-up), and the renewal is its cure, one
// control plane after another.
func (n *Node) refuseRenewOnUnhealthyCluster(ctx context.Context, st *nodestate.NodeState) error {
	h := n.env.Host
	ss, err := h.ServiceStatus(ctx, ServiceEtcd)
	if host.NotRunning(ss, err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("certs renew: status of %s: %w; nothing was changed", ServiceEtcd, err)
	}
	if expired := n.expiredLeaves(renewExemptingLeaves); len(expired) > 0 {
		msg := "this node's certificates have expired (" + strings.Join(expired, ", ") + "): the cluster's health is not checked before etcd's restart, the expiry being what keeps it unhealthy"
		n.log.Warn(msg)
		if n.env.Progress != nil {
			n.env.Progress(msg)
		}
		return nil
	}
	self := urlHostOf(st.Etcd.ClientURL)
	ms, err := n.members(ctx, []string{self}, "certs renew")
	if err != nil {
		return fmt.Errorf("certs renew refused: %w: this node's etcd runs and did not list its members (%w); nothing was changed: its restart onto the renewed certificates could cost the quorum: %s", ErrClusterUnhealthy, err, renewUnhealthyAdvice)
	}
	if len(ms) <= 1 {
		return nil
	}
	if _, _, err := n.healthyButForSpace(ctx, []string{self}, "certs renew", "this node's etcd restarts onto the renewed certificates"); err != nil {
		return fmt.Errorf("%w: %s", err, renewUnhealthyAdvice)
	}
	return nil
}

// expiredLeaves are those of names (relative to version.PKIDir) whose
// certificate on this node has expired by the host's clock, each with its
// date. One missing or that does not parse is not counted: it has no expiry
// to presume the cluster's health on.
func (n *Node) expiredLeaves(names []string) []string {
	h := n.env.Host
	now := h.Now()
	var out []string
	for _, name := range names {
		b, err := h.ReadFile(version.PKIFile(name))
		if err != nil {
			continue
		}
		crt, err := pki.ParseCert(b)
		if err != nil || now.Before(crt.NotAfter) {
			continue
		}
		out = append(out, fmt.Sprintf("%s on %s", name, crt.NotAfter.UTC().Format(time.RFC3339)))
	}
	return out
}

// renewedServiceRuns reports whether the service s runs here; one that does
// not (no supervisor runs anything) reads the renewed files when it starts.
func (n *Node) renewedServiceRuns(ctx context.Context, s string) (bool, error) {
	ss, err := n.env.Host.ServiceStatus(ctx, s)
	if host.NotRunning(ss, err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("certs renew: status of %s: %w; the certificates are renewed: restart it", s, err)
	}
	return true, nil
}

// loadSharedCAs reads the cluster's shared CAs from this node, refusing
// (never making new ones) when any is missing.
func (n *Node) loadSharedCAs() (*pki.Shared, error) {
	files := map[string][]byte{}
	for _, name := range pki.SharedFileNames() {
		b, err := n.env.Host.ReadFile(version.PKIFile(name))
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("the shared CA file %s is missing", version.PKIFile(name))
		}
		if err != nil {
			return nil, err
		}
		files[name] = b
	}
	return pki.LoadShared(files)
}
