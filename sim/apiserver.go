package sim

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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

// apiServerArgs are the host's kube-apiserver flags: the command line a
// real host's supervisor runs (controlplane.APIServerArgs of the host's node
// state and files: the node profile's audit flags, the at-rest encryption
// config when there is one), its paths mapped into the host's directory, so
// a wrong address, range or path in a node state is wrong here too. Then the
// simulator's own: the hosts share the machine's loopback, so it binds the
// address it advertises (a real host binds every address); the endpoint
// reconciler refuses a loopback advertise address and is off (no pod uses
// the kubernetes Service's endpoints here); no ServiceAccount admission
// (no controller manager makes the tokens it waits for); a short event TTL.
// The first flags are the values envtest's APIServer defaults (its cert
// dir), so the command line is one envtest ran.
func (h *Host) apiServerArgs() ([]string, error) {
	st, err := nodestate.Load(h.files)
	if err != nil {
		return nil, err
	}
	prod, err := controlplane.APIServerArgs(st, h.files)
	if err != nil {
		return nil, err
	}
	mapped, flags, err := h.hostFlags(prod)
	if err != nil {
		return nil, err
	}
	args := envtest.EmptyArguments()
	args.Set("cert-dir", h.Path(version.PKIDir))
	out := append(args.AsStrings(nil), mapped...)
	return append(out,
		"--bind-address="+flags["advertise-address"],
		"--endpoint-reconciler-type=none",
		"--disable-admission-plugins=ServiceAccount",
		"--event-ttl=5m",
	), nil
}

// startAPIServer starts the host's kube-apiserver and waits until it reports
// ready. On failure the process is killed.
func (h *Host) startAPIServer(ctx context.Context) (*apiServer, error) {
	bin, err := assets.KubeAPIServer()
	if err != nil {
		return nil, err
	}
	pkiDir := h.Path(version.PKIDir)
	for _, f := range []string{"apiserver.crt", "apiserver.key", "ca.crt", "sa.key", "sa.pub", "etcd/ca.crt", "apiserver-etcd-client.crt", "apiserver-kubelet-client.crt", "front-proxy-client.crt", "front-proxy-ca.crt"} {
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
	args, err := h.apiServerArgs()
	if err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start kube-apiserver on %s: %w", h.name, err)
	}
	cmd := exec.Command(bin, args...)
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
