package ha

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"path"
	"slices"
	"sort"
	"strings"
	"time"

	"stratum.dev/stratum/internal/host"
	"stratum.dev/stratum/internal/kubeconfig"
	"stratum.dev/stratum/internal/nodelock"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/version"
)

// ErrVIPNotServing matches a repoint refused because the VIP does not serve
// this cluster's apiserver with a certificate that covers it.
var ErrVIPNotServing = errors.New("the VIP does not serve this cluster's apiserver")

// vipProbeTimeout bounds one VIPServes probe.
const vipProbeTimeout = 5 * time.Second

// errVIPUnreachable marks a VIPServes failure where nothing answered.
var errVIPUnreachable = errors.New("nothing answered")

// repointConsumers are the local services that read this node's kubeconfigs
// and so are restarted after a repoint, when they run: kube-vip (its leader
// election goes through the apiserver) and the stratum operator. etcd and
// the apiserver read no kubeconfig and are left alone; stratum runs no
// controller manager or scheduler.
var repointConsumers = []string{ServiceVIP, serviceOperator}

// VIPServes reports whether the VIP serves this cluster's apiserver, as
// checkVIPServes does. Exported, and a var, so a test of a command that
// repoints, in this package or another, can stand in for a VIP that does or
// does not answer. It is consulted by the package-level NodeRepoint and
// RepointCilium; a Node's methods use the node's own check (Node.VIPServes).
var VIPServes = checkVIPServes

// checkVIPServes is Node.VIPServes on this machine.
func checkVIPServes(ctx context.Context, vip string) (bool, error) {
	n, err := local()
	if err != nil {
		return false, err
	}
	return n.VIPServes(ctx, vip)
}

// VIPServes reports whether https://<vip>:6443 serves this cluster's
// apiserver: dialed through the host's dialer, the TLS chain must verify
// against this node's cluster CA (version.PKIDir/ca.crt), the certificate's
// SANs must include the VIP, and the server must answer HTTP on /readyz (an
// apiserver answers 200, or 401/403 when anonymous requests are not
// allowed). false comes with the reason as the error.
func (n *Node) VIPServes(ctx context.Context, vip string) (bool, error) {
	return n.vipServes(ctx, vip, vipProbeTimeout)
}

// vipServes is VIPServes with the connection's dial bounded by dialWithin
// (the whole probe by vipProbeTimeout): a start's wait for the VIP dials
// again soon rather than wait out the neighbour resolution of an address
// its own candidate takes meanwhile, and still gives a busy apiserver its
// time to answer.
func (n *Node) vipServes(ctx context.Context, vip string, dialWithin time.Duration) (bool, error) {
	ip := net.ParseIP(vip)
	if ip == nil {
		return false, fmt.Errorf("%w: %q is not an IP address", ErrVIPNotServing, vip)
	}
	caPEM, err := n.env.Host.ReadFile(version.PKIFile("ca.crt"))
	if err != nil {
		return false, fmt.Errorf("read this node's cluster CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return false, fmt.Errorf("this node's cluster CA %s holds no certificate", version.PKIFile("ca.crt"))
	}
	h := n.env.Host
	// ServerName an IP: crypto/tls verifies it against the IP SANs.
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		ctx, cancel := context.WithTimeout(ctx, dialWithin)
		defer cancel()
		return h.DialContext(ctx, network, addr)
	}
	tr := &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: pool, ServerName: ip.String(), MinVersion: tls.VersionTLS12},
		DialContext:       dial,
		DisableKeepAlives: true,
	}
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr, Timeout: vipProbeTimeout}
	u := apiServerURL(ip.String()) + "/readyz"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return false, err
	}
	resp, err := cl.Do(req)
	if err != nil {
		var verify *tls.CertificateVerificationError
		if errors.As(err, &verify) {
			return false, fmt.Errorf("%w at %s: %v", ErrVIPNotServing, vip, err)
		}
		// Nothing answered, or the connection broke: the VIP may be
		// between holders (a kube-vip restarted by a repoint elsewhere).
		return false, fmt.Errorf("%w at %s: %w: %v", ErrVIPNotServing, vip, errVIPUnreachable, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	switch resp.StatusCode {
	case http.StatusOK, http.StatusUnauthorized, http.StatusForbidden:
		return true, nil
	}
	return false, fmt.Errorf("%w at %s: /readyz answered %s", ErrVIPNotServing, vip, resp.Status)
}

// RepointKubeconfigs rewrites every kubeconfig on this node to server.
func RepointKubeconfigs(server string) error {
	n, err := local()
	if err != nil {
		return err
	}
	return n.RepointKubeconfigs(server)
}

// RepointKubeconfigs is the package-level RepointKubeconfigs on this node:
// every *.conf under version.K8sConfDir (bootstrap.conf included) gets server
// as every cluster's server, its credentials and CA data kept byte for byte
// (kubeconfig.Repoint), and the node state records server as its Server, so
// the kubeconfigs a later `stratum up` writes name it too. A node with no
// state file has nothing to record; an unreadable state is an error found
// before any kubeconfig is rewritten. Every kubeconfig is parsed and
// repointed in memory before the first is written.
func (n *Node) RepointKubeconfigs(server string) error {
	h := n.env.Host
	st, rewrites, err := n.repointedKubeconfigs(server)
	if err != nil {
		return err
	}
	for _, rw := range rewrites {
		if err := h.WriteFile(rw.path, rw.data, rw.perm); err != nil {
			return fmt.Errorf("repoint kubeconfigs: write %s: %w; re-run to finish", rw.path, err)
		}
	}
	if st != nil && st.Server != server {
		st.Server = server
		if err := nodestate.Save(h, st); err != nil {
			return fmt.Errorf("repoint kubeconfigs: kubeconfigs rewritten, but %w; re-run to finish", err)
		}
	}
	n.log.Info("kubeconfigs repointed", "server", server, "files", len(rewrites))
	return nil
}

// repointedKubeconfigs reads the node state (nil when there is none) and
// every kubeconfig, and repoints each in memory: RepointKubeconfigs' checks,
// which a repoint also makes before it changes anything.
func (n *Node) repointedKubeconfigs(server string) (*nodestate.NodeState, []kubeconfigFile, error) {
	if u, err := url.Parse(server); err != nil || u.Scheme != "https" || u.Hostname() == "" || u.Port() == "" {
		return nil, nil, fmt.Errorf("repoint kubeconfigs: %q is not https://<host>:<port>; nothing was changed", server)
	}
	h := n.env.Host
	st, err := nodestate.Load(h)
	switch {
	case errors.Is(err, nodestate.ErrNoState):
		st = nil
	case err != nil:
		return nil, nil, fmt.Errorf("repoint kubeconfigs: %w; nothing was changed", err)
	}
	rewrites, err := nodeKubeconfigs(h)
	if err != nil {
		return nil, nil, fmt.Errorf("repoint kubeconfigs: %w; nothing was changed", err)
	}
	for i, rw := range rewrites {
		out, err := kubeconfig.Repoint(rw.data, server)
		if err != nil {
			return nil, nil, fmt.Errorf("repoint kubeconfigs: %s: %w; nothing was changed", rw.path, err)
		}
		rewrites[i].data = out
	}
	return st, rewrites, nil
}

// kubeconfigFile is one of the node's kubeconfigs, read.
type kubeconfigFile struct {
	path string
	data []byte
	perm fs.FileMode
}

// nodeKubeconfigs reads every *.conf under version.K8sConfDir: what a
// repoint rewrites.
func nodeKubeconfigs(h host.Files) ([]kubeconfigFile, error) {
	entries, err := h.ReadDir(version.K8sConfDir)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", version.K8sConfDir, err)
	}
	var out []kubeconfigFile
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".conf") {
			continue
		}
		p := path.Join(version.K8sConfDir, e.Name())
		b, err := h.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", p, err)
		}
		perm := fs.FileMode(0o600)
		if info, err := e.Info(); err == nil {
			perm = info.Mode().Perm()
		}
		out = append(out, kubeconfigFile{p, b, perm})
	}
	return out, nil
}

// NodeRepoint moves this node's clients onto the cluster VIP.
func NodeRepoint(w io.Writer, vip string) ([]string, error) {
	n, err := local()
	if err != nil {
		return nil, err
	}
	return n.nodeRepoint(context.Background(), w, vip, VIPServes)
}

// NodeRepoint is the package-level NodeRepoint on this node, with the node's
// own VIPServes check: nothing changes unless the VIP serves this cluster's
// apiserver; then every kubeconfig is rewritten to https://<vip>:6443
// (RepointKubeconfigs) and every running repointConsumers service is
// restarted. A consumer that fails to restart is a warning beside a nil
// error: the kubeconfigs were rewritten, so the repoint landed.
func (n *Node) NodeRepoint(ctx context.Context, w io.Writer, vip string) ([]string, error) {
	return n.nodeRepoint(ctx, w, vip, n.VIPServes)
}

func (n *Node) nodeRepoint(ctx context.Context, w io.Writer, vip string, serves func(context.Context, string) (bool, error)) ([]string, error) {
	if err := n.checkServes(ctx, vip, serves); err != nil {
		return nil, err
	}
	// Under the node's maintenance lock, as every operation that changes
	// this node takes it: a start racing the repoint (its strip of the join
	// token from bootstrap.conf, its adoption of a VIP) would have one write
	// back what the other just changed.
	release, err := nodelock.Acquire(n.env.Host, nodelock.Maintenance, "stratum repoint", n.lockOptions(ctx)...)
	if err != nil {
		return nil, Refusal(fmt.Errorf("repoint refused: %w; run it again once that is done", err))
	}
	defer release()
	// Every kubeconfig read and repointed in memory before coverVIP's first
	// change, so one that cannot be is a refusal, as in the dry run.
	server := apiServerURL(vip)
	if _, _, err := n.repointedKubeconfigs(server); err != nil {
		return nil, Refusal(err)
	}
	if err := n.coverVIP(ctx, w, vip); err != nil {
		return nil, err
	}
	if err := n.RepointKubeconfigs(server); err != nil {
		return nil, err
	}
	fmt.Fprintf(w, "kubeconfigs now point at %s\n", server)
	var warnings []string
	for _, s := range repointConsumers {
		ss, err := n.env.Host.ServiceStatus(ctx, s)
		if host.NotRunning(ss, err) {
			continue // not running here: it reads the kubeconfig when it starts
		}
		if err == nil {
			err = n.env.Host.RestartService(ctx, s)
		}
		if err != nil {
			warnings = append(warnings, fmt.Sprintf("%s was not restarted (%v): restart it so it reads the repointed kubeconfig", s, err))
			continue
		}
		fmt.Fprintf(w, "restarted %s\n", s)
	}
	sort.Strings(warnings)
	return warnings, nil
}

// coverVIP makes this control plane ready to hold the VIP before anything
// points at it: the node state records the VIP (so every start keeps the
// certificate covering it and runs kube-vip), the apiserver certificate is
// reissued when it does not cover it (and a running apiserver restarted onto
// it), and kube-vip is started. A node with no state (a worker) has nothing
// to cover.
func (n *Node) coverVIP(ctx context.Context, w io.Writer, vip string) error {
	h := n.env.Host
	st, err := nodestate.Load(h)
	if errors.Is(err, nodestate.ErrNoState) || err == nil && st.Role != nodestate.RoleControlPlane {
		return nil
	}
	if err != nil {
		return fmt.Errorf("repoint: %w; nothing was changed", err)
	}
	if st.VIP.Address != vip {
		st.VIP = nodestate.VIP{Address: vip, Interface: st.VIP.Interface}
		if err := nodestate.Save(h, st); err != nil {
			return fmt.Errorf("repoint: record the VIP %s in the node state: %w; nothing else was changed", vip, err)
		}
	}
	reissued, err := n.ensureAPIServerCoversVIP(st)
	if err != nil {
		return fmt.Errorf("repoint: %w", err)
	}
	if reissued {
		fmt.Fprintf(w, "apiserver certificate reissued to cover the VIP %s\n", vip)
		if ss, err := h.ServiceStatus(ctx, ServiceAPIServer); err == nil && ss.Running {
			if err := h.RestartService(ctx, ServiceAPIServer); err != nil {
				return fmt.Errorf("repoint: restart kube-apiserver onto its reissued certificate: %w; the node state records the VIP %s and the certificate covers it, the kubeconfigs were not changed, and kube-apiserver may be stopped (`stratum status` says): run `stratum up`, which starts it, then retry", err, vip)
			}
		}
	}
	if ss, err := h.ServiceStatus(ctx, ServiceVIP); err == nil && !ss.Running {
		if err := h.StartService(ctx, ServiceVIP); err != nil {
			n.log.Warn("kube-vip did not start on this node; other control planes hold the VIP", "err", err)
		}
	}
	return nil
}

// checkServes refuses a VIP that does not serve this cluster's apiserver. A
// VIP where nothing answers may be moving between holders (a repoint
// elsewhere restarts that node's kube-vip) and is asked again first
// (askWhileSilent); a wrong answer (another cluster's certificate, one that
// does not cover the VIP) refuses at once.
func (n *Node) checkServes(ctx context.Context, vip string, serves func(context.Context, string) (bool, error)) error {
	// The VIP is judged by this node's cluster CA: a machine without one
	// is not a node of any cluster, whatever the VIP serves.
	if _, err := n.env.Host.ReadFile(version.PKIFile("ca.crt")); errors.Is(err, fs.ErrNotExist) {
		return Refusal(fmt.Errorf("this machine is not a stratum node (no cluster CA at %s); nothing was changed: run it on a control plane or worker of the cluster", version.PKIFile("ca.crt")))
	}
	if err := n.refuseMemberAddressAsVIP(ctx, vip); err != nil {
		return err
	}
	var ok bool
	err := n.askWhileSilent(ctx, "the VIP "+vip, silentWithin, errVIPUnreachable, func() error {
		var err error
		ok, err = serves(ctx, vip)
		return err
	})
	if ok {
		return nil
	}
	if err == nil {
		err = ErrVIPNotServing
	}
	if !errors.Is(err, ErrVIPNotServing) {
		err = fmt.Errorf("%w: %w", ErrVIPNotServing, err)
	}
	return Refusal(fmt.Errorf("%w; nothing was changed: bring up the VIP (kube-vip) on the control planes, with an apiserver certificate that covers it, and retry", err))
}

// refuseMemberAddressAsVIP refuses, on a control plane, a VIP that is a
// control plane's own address: it passes the serving check (that node's
// apiserver certificate covers its own IP), and this node's kube-vip would
// then announce a live node's address. The addresses come from this node's
// state (its own, and the members its etcd started with) and from etcd's
// member list, asked through this node's member and those; a list no member
// answers is a warning, not a refusal, so a control plane whose etcd is down
// (no supervisor runs) still repoints, checked against what its state knows.
// A worker announces nothing, so its repoint is not checked here.
func (n *Node) refuseMemberAddressAsVIP(ctx context.Context, vip string) error {
	st, err := nodestate.Load(n.env.Host)
	if err != nil || st.Role != nodestate.RoleControlPlane {
		return nil // a worker, or a state coverVIP reports on
	}
	refuse := func(whose string) error {
		return Refusal(fmt.Errorf("the VIP %s is %s; nothing was changed: the VIP is an unused address on the control planes' network, which their kube-vip announces", vip, whose))
	}
	if vip == st.NodeIP {
		return refuse("this node's own address")
	}
	known := peerIPs(st.Etcd.InitialCluster, st.Etcd.PeerURL)
	if slices.Contains(known, vip) {
		return refuse("the address of a control plane this node's etcd started with")
	}
	ms, err := n.members(ctx, append([]string{urlHostOf(st.Etcd.ClientURL)}, known...), "repoint")
	if err != nil {
		n.log.Warn("the etcd member list could not be read: the VIP is checked against this node's own address and the members its etcd started with only", "vip", vip, "err", err)
		return nil
	}
	for _, m := range ms {
		for _, u := range append(slices.Clone(m.PeerURLs), m.ClientURLs...) {
			if urlHost(u) == vip {
				return refuse(fmt.Sprintf("the address of control plane %s (etcd member %s)", m.Name, u))
			}
		}
	}
	return nil
}
