package sim

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"stratum.dev/stratum/internal/assets"
	"stratum.dev/stratum/internal/controlplane"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/version"
)

// apiServer is a host's real kube-apiserver process, run against the host's
// own etcd member and serving on the host's address with the certificate from
// the host's PKI.
//
// Its flags are rendered by envtest's structured arguments
// (envtest.Arguments.AsStrings), with every value envtest's APIServer would
// default set explicitly, so the command line is the one envtest.APIServer
// ran. The simulator starts the process itself because envtest starts it
// without a parent-death signal (and offers no hook for one): a test binary
// that panicked or was killed left its apiservers running.
type apiServer struct {
	cmd     *exec.Cmd
	done    chan struct{}
	log     *os.File
	started time.Time
	// ran is how long the process ran, set before done closes.
	ran time.Duration
}

// usage says, once the process has ended, how long it ran and the CPU time
// it used: an apiserver whose etcd member has no leader re-opens its watches
// in a tight loop (most of a core), which on a simulated cluster's one
// machine slows every other host.
func (a *apiServer) usage() string {
	select {
	case <-a.done:
	default:
		return ""
	}
	st := a.cmd.ProcessState
	return fmt.Sprintf(" (ran %s, %s of CPU)", a.ran.Round(100*time.Millisecond), (st.UserTime() + st.SystemTime()).Round(10*time.Millisecond))
}

// Timing of an apiserver's start and stop.
const (
	// apiServerStartTimeout is a real host's (controlplane.ServiceReadyWithin):
	// the simulator runs more apiservers on one machine than any host does,
	// and a stricter bound only failed starts that were slow, not wrong.
	apiServerStartTimeout = controlplane.ServiceReadyWithin
	// apiServerStopTimeout: an apiserver whose etcd lost quorum hangs in
	// shutdown; it is killed after this.
	apiServerStopTimeout = 5 * time.Second
	apiServerPollEvery   = 100 * time.Millisecond
)

// apiServerArgs are the host's kube-apiserver flags. The first group are the
// values envtest.APIServer defaults (cert dir, secure port, bind address) and
// its Authn sets (client CA: clients authenticate with certificates the
// cluster CA signed, as on a real control plane); the rest are the
// simulator's own.
func (h *Host) apiServerArgs() []string {
	cfg := h.cluster.cfg
	pkiDir := h.Path(version.PKIDir)
	args := envtest.EmptyArguments()
	args.Set("cert-dir", pkiDir)
	args.Set("secure-port", strconv.Itoa(version.APIServerPort))
	args.Set("bind-address", h.ip.String())
	args.Set("client-ca-file", filepath.Join(pkiDir, "ca.crt"))

	args.Set("advertise-address", h.ip.String())
	// The endpoint reconcilers refuse a loopback advertise address, and every
	// simulated host lives on one; the simulation runs no pods that would use
	// the kubernetes Service's endpoints.
	args.Set("endpoint-reconciler-type", "none")
	args.Set("etcd-servers", h.ClientURL())
	args.Set("etcd-cafile", filepath.Join(pkiDir, "etcd/ca.crt"))
	args.Set("etcd-certfile", filepath.Join(pkiDir, "apiserver-etcd-client.crt"))
	args.Set("etcd-keyfile", filepath.Join(pkiDir, "apiserver-etcd-client.key"))
	args.Set("tls-cert-file", filepath.Join(pkiDir, "apiserver.crt"))
	args.Set("tls-private-key-file", filepath.Join(pkiDir, "apiserver.key"))
	args.Set("service-account-key-file", filepath.Join(pkiDir, "sa.pub"))
	args.Set("service-account-signing-key-file", filepath.Join(pkiDir, "sa.key"))
	args.Set("service-account-issuer", "https://kubernetes.default.svc."+cfg.ClusterDomain)
	args.Set("service-cluster-ip-range", cfg.ServiceCIDR)
	args.Set("enable-bootstrap-token-auth", "true")
	args.Set("authorization-mode", "Node,RBAC")
	args.Set("allow-privileged", "true")
	args.Set("disable-admission-plugins", "ServiceAccount")
	args.Set("profiling", "false")
	args.Set("audit-log-maxage", "0")
	args.Set("event-ttl", "5m")
	args.Set("v", "1")
	out := args.AsStrings(nil)
	// The node profile's flags, as a real host's apiserver gets them: the
	// cis profile's audit log, by the policy the node assembly wrote.
	if st, err := nodestate.Load(h.files); err == nil {
		out = append(out, controlplane.ProfileAPIServerArgs(st.Profile, h.Path)...)
	}
	return out
}

// startAPIServer starts the host's kube-apiserver and waits until it reports
// ready. On failure the process is killed.
func (h *Host) startAPIServer(ctx context.Context) (*apiServer, error) {
	bin, err := assets.KubeAPIServer()
	if err != nil {
		return nil, err
	}
	pkiDir := h.Path(version.PKIDir)
	for _, f := range []string{"apiserver.crt", "apiserver.key", "ca.crt", "sa.key", "sa.pub", "etcd/ca.crt", "apiserver-etcd-client.crt"} {
		if _, err := os.Stat(filepath.Join(pkiDir, f)); err != nil {
			return nil, fmt.Errorf("start kube-apiserver on %s: %w", h.name, err)
		}
	}
	caPEM, err := h.files.ReadFile(version.PKIFile("ca.crt"))
	if err != nil {
		return nil, fmt.Errorf("start kube-apiserver on %s: %w", h.name, err)
	}
	logPath := h.Path("/var/log/kube-apiserver.log")
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return nil, err
	}
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, h.apiServerArgs()...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := startChild(cmd); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start kube-apiserver on %s: %w", h.name, err)
	}
	a := &apiServer{cmd: cmd, done: make(chan struct{}), log: logFile, started: time.Now()}
	go func() {
		_ = cmd.Wait()
		a.ran = time.Since(a.started)
		close(a.done)
	}()
	waitCtx, cancel := context.WithTimeout(ctx, apiServerStartTimeout)
	err = controlplane.WaitReadyz(waitCtx, h.APIServerURL()+"/readyz", caPEM, apiServerPollEvery, a.done)
	cancel()
	if err != nil {
		stopChild(cmd, a.done, syscall.SIGKILL, 0)
		logFile.Close()
		tail, _ := os.ReadFile(logPath)
		return nil, fmt.Errorf("start kube-apiserver on %s: %w; log %s ends: %s", h.name, err, logPath, lastLines(string(tail), 5))
	}
	return a, nil
}

// stop stops the apiserver: SIGTERM to its process group, then SIGKILL after
// the stop timeout. It reports whether the kill was needed.
func (a *apiServer) stop() (killed bool) {
	killed = stopChild(a.cmd, a.done, syscall.SIGTERM, apiServerStopTimeout)
	a.log.Close()
	return killed
}

// kill ends the apiserver at once with SIGKILL, as a crash or an OOM kill
// does: no graceful shutdown, no in-flight request finished.
func (a *apiServer) kill() {
	stopChild(a.cmd, a.done, syscall.SIGKILL, 0)
	a.log.Close()
}
