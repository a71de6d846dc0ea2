package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"stratum.dev/stratum/internal/assets"
	"stratum.dev/stratum/internal/version"
)

// apiServer is a host's real kube-apiserver, started through envtest.APIServer
// against the host's own etcd member and serving on the host's address with
// the certificate from the host's PKI.
type apiServer struct {
	s   *envtest.APIServer
	log *os.File
}

// pkiAuthn is envtest's Authn over the cluster's own CA: clients authenticate
// with certificates the cluster CA signed (the admin kubeconfig on every
// host), exactly as on a real control plane. envtest's own user provisioning
// is not used.
type pkiAuthn struct{ clientCA string }

func (a pkiAuthn) Configure(_ string, args *envtest.Arguments) error {
	args.Set("client-ca-file", a.clientCA)
	return nil
}
func (pkiAuthn) Start() error { return nil }
func (pkiAuthn) Stop() error  { return nil }
func (pkiAuthn) AddUser(envtest.User, *rest.Config) (*rest.Config, error) {
	return nil, errors.New("the simulator authenticates with the cluster's own PKI; use a host's admin kubeconfig")
}

func (h *Host) startAPIServer(ctx context.Context) (*apiServer, error) {
	bin, err := assets.KubeAPIServer()
	if err != nil {
		return nil, err
	}
	cfg := h.cluster.cfg
	pkiDir := h.Path(version.PKIDir)
	for _, f := range []string{"apiserver.crt", "apiserver.key", "ca.crt", "sa.key", "sa.pub", "etcd/ca.crt", "apiserver-etcd-client.crt"} {
		if _, err := os.Stat(filepath.Join(pkiDir, f)); err != nil {
			return nil, fmt.Errorf("start kube-apiserver on %s: %w", h.name, err)
		}
	}
	etcdURL, _ := url.Parse(h.ClientURL())
	logPath := h.Path("/var/log/kube-apiserver.log")
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return nil, err
	}
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	timeout := 60 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	s := &envtest.APIServer{
		Path: bin,
		// envtest writes its own serving certificate only when CertDir has no
		// apiserver.crt; the host's PKI dir has ours.
		CertDir: pkiDir,
		EtcdURL: etcdURL,
		SecureServing: envtest.SecureServing{
			ListenAddr: envtest.ListenAddr{Address: h.ip.String(), Port: strconv.Itoa(version.APIServerPort)},
			Authn:      pkiAuthn{clientCA: filepath.Join(pkiDir, "ca.crt")},
		},
		StartTimeout: timeout,
		// An apiserver whose etcd lost quorum hangs in shutdown; it is
		// killed after this.
		StopTimeout: 5 * time.Second,
		Out:         io.Writer(logFile),
		Err:         io.Writer(logFile),
	}
	args := s.Configure()
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
	if err := s.Start(); err != nil {
		logFile.Close()
		tail, _ := os.ReadFile(logPath)
		return nil, fmt.Errorf("start kube-apiserver on %s: %w; log %s ends: %s", h.name, err, logPath, lastLines(string(tail), 5))
	}
	return &apiServer{s: s, log: logFile}, nil
}

// stop stops the apiserver: SIGTERM, then SIGKILL after the stop timeout
// (envtest owns the process; a hard kill is not exposed by it).
func (a *apiServer) stop() error {
	err := a.s.Stop()
	a.log.Close()
	return err
}
