// Package controlplane is a real host's control-plane processes: where their
// binaries come from (one directory, checked before anything changes), and
// the command lines of etcd and kube-apiserver rendered from the node state,
// so a start after a join, a restore or a repoint runs what the state now
// records. stratum's supervisor (internal/supervisor) runs them.
//
// The simulator runs the same services its own way (embedded etcd, envtest's
// apiserver flags); what both share is the node state they start from.
package controlplane

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
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"stratum.dev/stratum/internal/certbundle"
	"stratum.dev/stratum/internal/host"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/version"
)

// DefaultBinDir is where a real host keeps the control-plane binaries
// (`make dist` puts them in its bin/).
const DefaultBinDir = "/var/lib/stratum/bin"

// ServiceReadyWithin bounds a start's wait for etcd or the apiserver to
// serve: a member whose peers are all down never finds a leader. A starting
// apiserver is CPU-bound for its first seconds (its RBAC bootstrap alone
// reconciles some 150 objects through itself); on a loaded 2-core machine
// that took over a minute. The simulator allows its apiservers the same.
const ServiceReadyWithin = 2 * time.Minute

// LogDir is where the supervisor appends each service's log.
const LogDir = "/var/log/stratum"

// The cis profile's audit log: the policy ha writes at the node assembly,
// and the log the apiserver writes by it.
const (
	AuditPolicyPath = version.K8sConfDir + "/audit-policy.yaml"
	AuditLogPath    = LogDir + "/kube-apiserver-audit.log"
)

// ProfileAPIServerArgs are the kube-apiserver flags a node profile adds.
// The cis profile's are its audit log (CIS Kubernetes Benchmark 1.2.16 to
// 1.2.19): the policy ha wrote, the log file, and its retention (30 days,
// 10 files of 100 MB). path maps a host path to the one the apiserver
// opens: the identity on a real host, the host's directory in the
// simulator. A node without a profile adds none.
func ProfileAPIServerArgs(profile string, path func(string) string) []string {
	if profile != "cis" {
		return nil
	}
	return []string{
		"--audit-policy-file=" + path(AuditPolicyPath),
		"--audit-log-path=" + path(AuditLogPath),
		"--audit-log-maxage=30",
		"--audit-log-maxbackup=10",
		"--audit-log-maxsize=100",
	}
}

// Binary names inside the bin directory.
const (
	EtcdBinary      = "etcd"
	APIServerBinary = "kube-apiserver"
)

// ErrBinary matches a control-plane binary that is missing, not executable or
// of another version than this stratum pins.
var ErrBinary = errors.New("control-plane binary unusable")

// Binaries is the directory the control-plane binaries come from.
type Binaries struct{ Dir string }

// Path is the named binary's path.
func (b Binaries) Path(name string) string { return filepath.Join(b.Dir, name) }

// acceptedVersions are the versions each binary may be, the pinned one
// first, each with what its --version prints. etcd may also be the previous
// minor: `stratum etcd downgrade` has each member's binary swapped to it,
// and a supervisor refusing it would leave a downgraded node unable to
// start (etcd itself refuses a binary older than its cluster's version).
var acceptedVersions = map[string][]struct{ version, says string }{
	EtcdBinary: {
		{version.Etcd, "etcd Version: " + strings.TrimPrefix(version.Etcd, "v")},
		{version.EtcdPrevious, "etcd Version: " + strings.TrimPrefix(version.EtcdPrevious, "v")},
	},
	APIServerBinary: {{version.Kubernetes, "Kubernetes " + version.Kubernetes}},
}

// Check reports an error matching ErrBinary unless the named binary exists,
// is executable and says it is a version this stratum runs (Version).
func (b Binaries) Check(ctx context.Context, name string) error {
	_, err := b.Version(ctx, name)
	return err
}

// Version is the version the named binary says it is ("v3.6.16"), after
// the checks of Check: it exists, is executable, only root may change it,
// and it is the pinned version, or for etcd the previous minor (a
// downgraded member's). It runs the binary's --version, nothing else.
func (b Binaries) Version(ctx context.Context, name string) (string, error) {
	p := b.Path(name)
	fix := fmt.Sprintf("put the pinned %s there (the bin/ of `make dist`, or `make assets` in a checkout) or pass --bin-dir", name)
	fi, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("%w: %s is missing: %s", ErrBinary, p, fix)
	}
	if err != nil {
		return "", fmt.Errorf("%w: %s: %v", ErrBinary, p, err)
	}
	if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("%w: %s is not an executable file (mode %v): chmod +x it or %s", ErrBinary, p, fi.Mode(), fix)
	}
	if err := RootOnlyWritable(p); err != nil {
		return "", fmt.Errorf("%w: %w", ErrBinary, err)
	}
	vctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(vctx, p, "--version")
	cmd.WaitDelay = time.Second // a child left holding its output does not hold the check up
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%w: %s --version failed: %v: %s", ErrBinary, p, err, firstLine(string(out)))
	}
	accepted := acceptedVersions[name]
	if len(accepted) == 0 {
		return "", nil
	}
	var says []string
	for _, a := range accepted {
		if saysLine(string(out), a.says) {
			return a.version, nil
		}
		says = append(says, fmt.Sprintf("%q", a.says))
	}
	return "", fmt.Errorf("%w: %s is %q, this stratum runs %s: %s", ErrBinary, p, firstLine(string(out)), strings.Join(says, " or "), fix)
}

// saysLine reports whether one line of a --version output is exactly says:
// "Kubernetes v1.37.20" is not v1.37.2, though it contains it.
func saysLine(out, says string) bool {
	for line := range strings.Lines(out) {
		if strings.TrimSpace(line) == says {
			return true
		}
	}
	return false
}

// RootOnlyWritable refuses, when this process runs as root, a program that
// another user could change or replace before root runs it: the file, or
// any directory above it, owned by another user or writable by its group or
// others (a sticky directory, such as /tmp, lets no one replace another's
// entry), or a link on the way that is not root's — on the path as given, on
// each path a link of the chain points to, and on the path its links resolve
// to. Root runs control-plane binaries at
// every start and stratum itself at every boot: one in a user's home or in
// an archive a user extracted would run that user's code as root.
func RootOnlyWritable(p string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return err
	}
	starts := linkChain(abs)
	if real, err := filepath.EvalSymlinks(abs); err == nil && !slices.Contains(starts, real) {
		starts = append(starts, real)
	}
	for _, start := range starts {
		for q := start; ; q = filepath.Dir(q) {
			fi, err := os.Lstat(q)
			if err != nil {
				return fmt.Errorf("%s: %w", q, err)
			}
			what := "the directory"
			if q == start {
				what = "the file"
			}
			st, ok := fi.Sys().(*syscall.Stat_t)
			switch {
			case !ok:
			case st.Uid != 0:
				return fmt.Errorf("%s, run by root, is not root's alone: %s %s belongs to uid %d, who could replace it: chown root it, or use a copy in a root-owned directory", p, what, q, st.Uid)
			case fi.Mode()&fs.ModeSymlink == 0 && fi.Mode().Perm()&0o022 != 0 && (q == start || fi.Mode()&fs.ModeSticky == 0):
				return fmt.Errorf("%s, run by root, is not root's alone: %s %s is writable by its group or others (mode %v): chmod go-w it, or use a copy in a root-owned directory", p, what, q, fi.Mode())
			}
			if filepath.Dir(q) == q {
				break
			}
		}
	}
	return nil
}

// linkChain is abs and, while the path is a link, each path it points to in
// turn (at most 40, as the kernel follows): a chain A -> /srv/shared/hop ->
// /opt/stratum/stratum is checked at its middle hop too, whose directory
// neither the path as given nor the one it resolves to passes through.
func linkChain(abs string) []string {
	chain := []string{abs}
	for cur := abs; len(chain) <= 40; {
		fi, err := os.Lstat(cur)
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			break
		}
		target, err := os.Readlink(cur)
		if err != nil {
			break
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(cur), target)
		}
		cur = filepath.Clean(target)
		if slices.Contains(chain, cur) {
			break // a loop: the resolution fails at the start anyway
		}
		chain = append(chain, cur)
	}
	return chain
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// Ports each service listens on.
var Ports = map[string][]int{
	EtcdBinary:      {version.EtcdClientPort, version.EtcdPeerPort},
	APIServerBinary: {version.APIServerPort},
}

// PortsFree reports an error naming every port of ports something already
// listens on (on any address).
func PortsFree(ports []int) error {
	var busy []string
	for _, p := range ports {
		ln, err := net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(p)))
		if err != nil {
			busy = append(busy, fmt.Sprintf("port %d is in use (%v)", p, err))
			continue
		}
		ln.Close()
	}
	if len(busy) > 0 {
		return errors.New(strings.Join(busy, "; ") + ": stop what listens there (another etcd or kube-apiserver?)")
	}
	return nil
}

// pki is a host path under the node's PKI directory.
func pki(name string) string { return version.PKIFile(name) }

// EtcdArgs is the local etcd member's command line from the node state:
// its name, URLs, initial cluster and state, data directory and the etcd
// CA's mutual TLS for clients and peers, at etcd's production timing.
func EtcdArgs(st *nodestate.NodeState) ([]string, error) {
	e := st.Etcd
	if e.Name == "" || e.PeerURL == "" || e.ClientURL == "" || e.InitialCluster == "" || e.InitialClusterState == "" {
		return nil, fmt.Errorf("node state %s does not say how etcd boots (name, URLs, initial cluster and state are required)", nodestate.Path)
	}
	args := []string{
		"--name=" + e.Name,
		"--data-dir=" + version.EtcdDataDir,
		"--listen-client-urls=" + e.ClientURL,
		"--advertise-client-urls=" + e.ClientURL,
		"--listen-peer-urls=" + e.PeerURL,
		"--initial-advertise-peer-urls=" + e.PeerURL,
		"--initial-cluster=" + e.InitialCluster,
		"--initial-cluster-state=" + e.InitialClusterState,
		"--initial-cluster-token=stratum",
		"--cert-file=" + pki("etcd/server.crt"), "--key-file=" + pki("etcd/server.key"),
		"--trusted-ca-file=" + pki("etcd/ca.crt"), "--client-cert-auth",
		"--peer-cert-file=" + pki("etcd/peer.crt"), "--peer-key-file=" + pki("etcd/peer.key"),
		"--peer-trusted-ca-file=" + pki("etcd/ca.crt"), "--peer-client-cert-auth",
		"--log-level=warn",
	}
	if e.QuotaBackendBytes > 0 {
		args = append(args, "--quota-backend-bytes="+strconv.FormatInt(e.QuotaBackendBytes, 10))
	}
	return args, nil
}

// Defaults of a node state written before these fields existed.
const (
	defaultServiceCIDR   = "10.96.0.0/12"
	defaultClusterDomain = "cluster.local"
)

// APIServerArgs is the local kube-apiserver's command line from the node
// state and the node's files: it advertises the node's address and listens
// on all of them (the VIP too, while this node holds it), stores in the local
// etcd member, serves the certificate from the node's PKI, authenticates
// client certificates, bootstrap tokens and service-account tokens, and
// authorises with Node and RBAC, NodeRestriction admitting a kubelet's
// writes to its own Node and pods only (the Node authorizer lets any node
// write every Node object; kubeadm, k3s and Talos enable it too). It
// presents the apiserver-kubelet-client certificate to kubelets (logs, exec,
// port-forward: a kubelet refuses an apiserver without one) and the
// front-proxy client certificate to aggregated API servers, whose
// authenticating proxy it is (the requestheader flags, which it publishes in
// kube-system/extension-apiserver-authentication for them: metrics-server
// and `kubectl top` need both). The at-rest encryption config is used when
// the node has one.
func APIServerArgs(st *nodestate.NodeState, files host.Files) ([]string, error) {
	advertise := nodestate.FirstIP(st.NodeIP)
	if net.ParseIP(advertise) == nil {
		return nil, fmt.Errorf("node state %s has no usable node IP (%q)", nodestate.Path, st.NodeIP)
	}
	if st.Etcd.ClientURL == "" {
		return nil, fmt.Errorf("node state %s names no local etcd client URL", nodestate.Path)
	}
	svc, domain := st.ServiceCIDR, st.ClusterDomain
	if svc == "" {
		svc = defaultServiceCIDR
	}
	if domain == "" {
		domain = defaultClusterDomain
	}
	args := []string{
		"--advertise-address=" + advertise,
		"--bind-address=0.0.0.0",
		"--secure-port=" + strconv.Itoa(version.APIServerPort),
		"--etcd-servers=" + st.Etcd.ClientURL,
		"--etcd-cafile=" + pki("etcd/ca.crt"),
		"--etcd-certfile=" + pki("apiserver-etcd-client.crt"),
		"--etcd-keyfile=" + pki("apiserver-etcd-client.key"),
		"--tls-cert-file=" + pki("apiserver.crt"),
		"--tls-private-key-file=" + pki("apiserver.key"),
		"--client-ca-file=" + pki("ca.crt"),
		"--service-account-key-file=" + pki("sa.pub"),
		"--service-account-signing-key-file=" + pki("sa.key"),
		"--service-account-issuer=https://kubernetes.default.svc." + domain,
		"--service-cluster-ip-range=" + svc,
		"--enable-bootstrap-token-auth=true",
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--kubelet-client-certificate=" + pki("apiserver-kubelet-client.crt"),
		"--kubelet-client-key=" + pki("apiserver-kubelet-client.key"),
		"--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
		"--proxy-client-cert-file=" + pki("front-proxy-client.crt"),
		"--proxy-client-key-file=" + pki("front-proxy-client.key"),
		"--requestheader-client-ca-file=" + pki("front-proxy-ca.crt"),
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-username-headers=X-Remote-User",
		"--allow-privileged=true",
		"--profiling=false",
		"--v=1",
	}
	args = append(args, ProfileAPIServerArgs(st.Profile, func(p string) string { return p })...)
	if _, err := files.Stat(certbundle.EncryptionConfigPath); err == nil {
		args = append(args, "--encryption-provider-config="+certbundle.EncryptionConfigPath)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("at-rest encryption config %s: %w", certbundle.EncryptionConfigPath, err)
	}
	return args, nil
}

// ClientHost is the host part of a URL from the node state.
func ClientHost(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return ""
	}
	return u.Hostname()
}

// WaitAPIServerReady polls https://<ip>:6443/readyz, verified against the
// cluster CA in caPEM, until it answers 200 or ctx ends.
func WaitAPIServerReady(ctx context.Context, ip string, caPEM []byte) error {
	u := "https://" + net.JoinHostPort(ip, strconv.Itoa(version.APIServerPort)) + "/readyz"
	if err := WaitReadyz(ctx, u, caPEM, 200*time.Millisecond, nil); err != nil {
		if errors.Is(err, ErrNoCACertificate) {
			return fmt.Errorf("%s: %w", pki("ca.crt"), err)
		}
		return err
	}
	return nil
}

// ErrNoCACertificate: the cluster CA given to WaitReadyz holds no
// certificate, so no answer could be verified.
var ErrNoCACertificate = errors.New("the cluster CA holds no certificate")

// WaitReadyz polls readyzURL (a kube-apiserver's /readyz) every interval, with a
// client that trusts only the cluster CA in caPEM (as a user's client does),
// until it answers 200, exited is closed (the process ended; nil when the
// caller watches no process) or ctx ends. The error names the last answer:
// a failing /readyz's failing checks (ReadyzAnswer).
func WaitReadyz(ctx context.Context, readyzURL string, caPEM []byte, interval time.Duration, exited <-chan struct{}) error {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return ErrNoCACertificate
	}
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer client.CloseIdleConnections()
	var last error
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, readyzURL, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req) // a transport error names the URL itself
		if err == nil {
			err = ReadyzAnswer(resp)
			if err == nil {
				return nil
			}
			err = fmt.Errorf("%s: %w", readyzURL, err)
		}
		if ctx.Err() == nil || last == nil {
			// A request cut by ctx's end says nothing of the server.
			last = err
		}
		select {
		case <-exited:
			return fmt.Errorf("kube-apiserver exited before it was ready (last: %w)", last)
		case <-ctx.Done():
			return fmt.Errorf("kube-apiserver not ready: %w (last: %w)", ctx.Err(), last)
		case <-time.After(interval):
		}
	}
}

// ReadyzAnswer reads and closes an apiserver's /readyz (or /healthz, /livez)
// response: nil on 200, otherwise an error with the status and the checks
// that failed. A failing /readyz lists every check as "[+]name ok" or
// "[-]name failed: reason withheld"; naming the failed ones says what the
// apiserver waits for (its etcd, a post-start hook) where the status alone
// does not.
func ReadyzAnswer(resp *http.Response) error {
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		return nil
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var failed []string
	for _, line := range strings.Split(string(body), "\n") {
		name, ok := strings.CutPrefix(strings.TrimSpace(line), "[-]")
		if !ok {
			continue
		}
		name, _, _ = strings.Cut(name, " ")
		failed = append(failed, name)
	}
	if len(failed) == 0 {
		return fmt.Errorf("status %s", resp.Status)
	}
	return fmt.Errorf("status %s, failing checks: %s", resp.Status, strings.Join(failed, ", "))
}

// LogPath is the named service's log.
func LogPath(service string) string { return path.Join(LogDir, service+".log") }
