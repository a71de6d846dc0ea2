// Package kubeconfig builds, reads and repoints the kubeconfigs of a stratum
// node with client-go's clientcmd.
//
// A kubeconfig stratum writes names one cluster "stratum", one user and one
// context "stratum", which is current, and embeds its certificates and keys
// as data rather than file paths: the file is whole on its own, on a real
// host or a simulated one, and the package stays pure (bytes in, bytes out).
package kubeconfig

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"stratum.dev/stratum/internal/apiretry"
	"stratum.dev/stratum/internal/pki"
)

// Names of the cluster and context every kubeconfig stratum writes.
const (
	ClusterName = "stratum"
	ContextName = "stratum"
)

// Names of a control-plane node's kubeconfigs (version.Kubeconfig(name) is
// each one's path).
const (
	Admin             = "admin"
	ControllerManager = "controller-manager"
	Scheduler         = "scheduler"
)

// ForCert is a kubeconfig for server that trusts caPEM and authenticates as
// user with the client certificate certPEM and key keyPEM.
func ForCert(server string, caPEM, certPEM, keyPEM []byte, user string) ([]byte, error) {
	if len(certPEM) == 0 || len(keyPEM) == 0 {
		return nil, fmt.Errorf("kubeconfig for %q: client certificate or key is empty", user)
	}
	auth := clientcmdapi.NewAuthInfo()
	auth.ClientCertificateData = certPEM
	auth.ClientKeyData = keyPEM
	return build(server, caPEM, user, auth)
}

// ForToken is a kubeconfig for server that trusts caPEM and authenticates as
// user with a bearer token (a bootstrap token during a join).
func ForToken(server string, caPEM []byte, token, user string) ([]byte, error) {
	if token == "" {
		return nil, fmt.Errorf("kubeconfig for %q: token is empty", user)
	}
	auth := clientcmdapi.NewAuthInfo()
	auth.Token = token
	return build(server, caPEM, user, auth)
}

// build assembles and serializes the one-cluster, one-user kubeconfig.
func build(server string, caPEM []byte, user string, auth *clientcmdapi.AuthInfo) ([]byte, error) {
	if user == "" {
		return nil, errors.New("kubeconfig: user name is empty")
	}
	if err := checkServer(server); err != nil {
		return nil, fmt.Errorf("kubeconfig for %q: %w", user, err)
	}
	if len(caPEM) == 0 {
		return nil, fmt.Errorf("kubeconfig for %q: CA certificate is empty", user)
	}
	cfg := clientcmdapi.NewConfig()
	cluster := clientcmdapi.NewCluster()
	cluster.Server = server
	cluster.CertificateAuthorityData = caPEM
	cfg.Clusters[ClusterName] = cluster
	cfg.AuthInfos[user] = auth
	kctx := clientcmdapi.NewContext()
	kctx.Cluster = ClusterName
	kctx.AuthInfo = user
	cfg.Contexts[ContextName] = kctx
	cfg.CurrentContext = ContextName
	if err := clientcmd.Validate(*cfg); err != nil {
		return nil, fmt.Errorf("kubeconfig for %q: %w", user, err)
	}
	out, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig for %q: serialize: %w", user, err)
	}
	return out, nil
}

// Server is the API server address of the current context's cluster.
func Server(kubeconfig []byte) (string, error) {
	cfg, kctx, err := current(kubeconfig)
	if err != nil {
		return "", fmt.Errorf("kubeconfig server: %w", err)
	}
	cluster, ok := cfg.Clusters[kctx.Cluster]
	if !ok || cluster == nil {
		return "", fmt.Errorf("kubeconfig server: context %q names cluster %q, which is not defined", cfg.CurrentContext, kctx.Cluster)
	}
	if cluster.Server == "" {
		return "", fmt.Errorf("kubeconfig server: cluster %q has no server", kctx.Cluster)
	}
	return cluster.Server, nil
}

// Repoint returns kubeconfig with every cluster's server set to server (the
// VIP, when a node's clients move to it). Everything else, the credentials and
// CA data above all, is kept byte for byte.
func Repoint(kubeconfig []byte, server string) ([]byte, error) {
	if err := checkServer(server); err != nil {
		return nil, fmt.Errorf("repoint kubeconfig: %w", err)
	}
	cfg, err := load(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("repoint kubeconfig to %s: %w", server, err)
	}
	if len(cfg.Clusters) == 0 {
		return nil, fmt.Errorf("repoint kubeconfig to %s: it defines no cluster", server)
	}
	for _, c := range cfg.Clusters {
		c.Server = server
	}
	out, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, fmt.Errorf("repoint kubeconfig to %s: serialize: %w", server, err)
	}
	return out, nil
}

// WithoutCredentials returns kubeconfig with every user's credentials
// (tokens, token files, client certificates and keys, basic auth, exec and
// auth-provider plugins) removed, keeping its clusters and contexts, and
// whether it held any: a kubeconfig kept as a record after its credentials
// are done with. One that held none is returned as it was.
func WithoutCredentials(kubeconfig []byte) ([]byte, bool, error) {
	cfg, err := load(kubeconfig)
	if err != nil {
		return nil, false, fmt.Errorf("remove kubeconfig credentials: %w", err)
	}
	held := false
	for name, a := range cfg.AuthInfos {
		if a != nil && (a.Token != "" || a.TokenFile != "" || len(a.ClientCertificateData) > 0 || a.ClientCertificate != "" ||
			len(a.ClientKeyData) > 0 || a.ClientKey != "" || a.Username != "" || a.Password != "" || a.Exec != nil || a.AuthProvider != nil) {
			held = true
			cfg.AuthInfos[name] = clientcmdapi.NewAuthInfo()
		}
	}
	if !held {
		return kubeconfig, false, nil
	}
	out, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, false, fmt.Errorf("remove kubeconfig credentials: serialize: %w", err)
	}
	return out, true, nil
}

// TokenOf is the bearer token of the current context's user, read from the
// kubeconfig's own auth info: a token file or an exec plugin would need the
// host, so it is an error, as is a user with no token at all.
func TokenOf(kubeconfig []byte) (string, error) {
	cfg, kctx, err := current(kubeconfig)
	if err != nil {
		return "", fmt.Errorf("kubeconfig token: %w", err)
	}
	auth, ok := cfg.AuthInfos[kctx.AuthInfo]
	if !ok || auth == nil {
		return "", fmt.Errorf("kubeconfig token: context %q names user %q, which is not defined", cfg.CurrentContext, kctx.AuthInfo)
	}
	if auth.Token == "" {
		return "", fmt.Errorf("kubeconfig token: user %q has no embedded token", kctx.AuthInfo)
	}
	return auth.Token, nil
}

// ClientCertOf is the PEM client certificate embedded in the current
// context's user; a user without one (a token user) is an error.
func ClientCertOf(kubeconfig []byte) ([]byte, error) {
	cfg, kctx, err := current(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig client certificate: %w", err)
	}
	auth, ok := cfg.AuthInfos[kctx.AuthInfo]
	if !ok || auth == nil || len(auth.ClientCertificateData) == 0 {
		return nil, fmt.Errorf("kubeconfig client certificate: user %q has no embedded client certificate", kctx.AuthInfo)
	}
	return auth.ClientCertificateData, nil
}

// The client-side rate limit of RESTConfig's clients.
const (
	clientQPS   = 50
	clientBurst = 100
)

// RESTConfig is the client configuration of kubeconfig's current context,
// for building clientsets. Its reads that lose their connection (a VIP
// moving mid-request) are sent again (apiretry.RetryReads), and it allows
// clientQPS requests a second (burst clientBurst), as kubectl does, not
// client-go's 5: stratum's steps are short bursts of requests, not a
// controller's steady stream. It never goes through a proxy: see noProxy.
func RESTConfig(kubeconfig []byte) (*rest.Config, error) {
	if _, _, err := current(kubeconfig); err != nil {
		return nil, fmt.Errorf("kubeconfig REST config: %w", err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig REST config: %w", err)
	}
	cfg.Wrap(apiretry.RetryReads)
	cfg.QPS, cfg.Burst = clientQPS, clientBurst
	cfg.Proxy = noProxy
	return cfg, nil
}

// noProxy sends every request directly. stratum's clients talk to the
// cluster's own control planes (the VIP, node addresses), and client-go takes
// a nil Proxy as HTTPS_PROXY from the environment: a root shell whose profile
// sets a corporate proxy sent a join's fence take and a supervisor's VIP and
// operator elections to the proxy, which refused them.
func noProxy(*http.Request) (*url.URL, error) { return nil, nil }

// nodeUsers are the client identities of a control-plane node's kubeconfigs,
// by name: the CN is also the kubeconfig's user name, as kubeadm writes them.
var nodeUsers = map[string]struct {
	cn  string
	org []string
}{
	Admin:             {pki.AdminCN, []string{pki.ClusterAdminsGroup}},
	ControllerManager: {"system:kube-controller-manager", nil},
	Scheduler:         {"system:kube-scheduler", nil},
}

// NodeKubeconfigs returns a control-plane node's kubeconfigs by name (the
// names Names lists), each with a fresh client certificate from clusterCA and
// pointed at server: admin (kubernetes-admin in stratum:cluster-admins,
// which RBAC binds to cluster-admin: internal/clusteradmins),
// controller-manager (system:kube-controller-manager) and scheduler
// (system:kube-scheduler). The caller writes each to version.Kubeconfig(name).
func NodeKubeconfigs(clusterCA *pki.CA, server string, now time.Time) (map[string][]byte, error) {
	if clusterCA == nil {
		return nil, errors.New("node kubeconfigs: no cluster CA")
	}
	if err := checkServer(server); err != nil {
		return nil, fmt.Errorf("node kubeconfigs: %w", err)
	}
	out := make(map[string][]byte, len(nodeUsers))
	for _, name := range Names() {
		u := nodeUsers[name]
		certPEM, keyPEM, err := clusterCA.Issue(pki.LeafSpec{CommonName: u.cn, Organization: u.org, Client: true}, now)
		if err != nil {
			return nil, fmt.Errorf("node kubeconfig %s: %w", name, err)
		}
		kc, err := ForCert(server, clusterCA.CertPEM, certPEM, keyPEM, u.cn)
		if err != nil {
			return nil, fmt.Errorf("node kubeconfig %s: %w", name, err)
		}
		out[name] = kc
	}
	return out, nil
}

// Names lists the names of a control-plane node's kubeconfigs, sorted.
func Names() []string {
	names := make([]string, 0, len(nodeUsers))
	for n := range nodeUsers {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// load parses a kubeconfig. clientcmd reads empty input as an empty config,
// which is never what a caller holding a file meant, so it is an error here.
func load(kubeconfig []byte) (*clientcmdapi.Config, error) {
	if len(kubeconfig) == 0 {
		return nil, errors.New("kubeconfig is empty")
	}
	cfg, err := clientcmd.Load(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("parse kubeconfig: %w", err)
	}
	return cfg, nil
}

// current parses a kubeconfig and finds its current context.
func current(kubeconfig []byte) (*clientcmdapi.Config, *clientcmdapi.Context, error) {
	cfg, err := load(kubeconfig)
	if err != nil {
		return nil, nil, err
	}
	if cfg.CurrentContext == "" {
		return nil, nil, errors.New("kubeconfig has no current context")
	}
	kctx, ok := cfg.Contexts[cfg.CurrentContext]
	if !ok || kctx == nil {
		return nil, nil, fmt.Errorf("current context %q is not defined", cfg.CurrentContext)
	}
	return cfg, kctx, nil
}

// checkServer refuses a server that is not an https URL with a host: every
// stratum apiserver serves TLS, and a kubeconfig carrying CA data for a plain
// http address is a mistake.
func checkServer(server string) error {
	u, err := url.Parse(server)
	if err != nil {
		return fmt.Errorf("server %q: %w", server, err)
	}
	if u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("server %q is not an https://host[:port] URL", server)
	}
	return nil
}

// ForCA is a credential-free kubeconfig naming server and its CA: what
// cluster-info publishes for joiners to discover (and pin) the cluster CA.
func ForCA(server string, caPEM []byte) ([]byte, error) {
	if err := checkServer(server); err != nil {
		return nil, fmt.Errorf("cluster-info kubeconfig: %w", err)
	}
	if len(caPEM) == 0 {
		return nil, errors.New("cluster-info kubeconfig: CA certificate is empty")
	}
	cfg := clientcmdapi.NewConfig()
	cluster := clientcmdapi.NewCluster()
	cluster.Server = server
	cluster.CertificateAuthorityData = caPEM
	cfg.Clusters[ClusterName] = cluster
	return clientcmd.Write(*cfg)
}

// CAOf is the CA data of the kubeconfig's current cluster, or of its only
// cluster when it has no current context (a cluster-info kubeconfig).
func CAOf(kubeconfig []byte) ([]byte, error) {
	cfg, err := load(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig CA: %w", err)
	}
	var cluster *clientcmdapi.Cluster
	if kctx, ok := cfg.Contexts[cfg.CurrentContext]; ok && kctx != nil {
		cluster = cfg.Clusters[kctx.Cluster]
	} else if len(cfg.Clusters) == 1 {
		for _, c := range cfg.Clusters {
			cluster = c
		}
	}
	if cluster == nil || len(cluster.CertificateAuthorityData) == 0 {
		return nil, errors.New("kubeconfig CA: no cluster with embedded CA data")
	}
	return cluster.CertificateAuthorityData, nil
}
