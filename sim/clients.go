package sim

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"stratum.dev/stratum/internal/kubeconfig"
	"stratum.dev/stratum/internal/version"
)

// AdminConfig is the host's admin kubeconfig aimed at the host's own
// apiserver (the kubeconfig on disk may target the VIP).
func (h *Host) AdminConfig() (*rest.Config, error) {
	kc, err := h.files.ReadFile(version.Kubeconfig("admin"))
	if err != nil {
		return nil, fmt.Errorf("%s admin kubeconfig: %w", h.name, err)
	}
	cfg, err := kubeconfig.RESTConfig(kc)
	if err != nil {
		return nil, err
	}
	cfg.Host = h.APIServerURL()
	cfg.QPS, cfg.Burst = 200, 400
	return cfg, nil
}

// Admin is a clientset with admin credentials on the host's own apiserver.
func (h *Host) Admin() (kubernetes.Interface, error) {
	cfg, err := h.AdminConfig()
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

// VIPConfig is an admin rest.Config aimed at the VIP, with the credentials of
// the first control plane.
func (c *Cluster) VIPConfig() (*rest.Config, error) {
	cfg, err := c.hosts[0].AdminConfig()
	if err != nil {
		return nil, err
	}
	cfg.Host = c.VIPURL()
	return cfg, nil
}

// EtcdClient is an etcd client with the host's etcd client certificate, dialing
// through the host's Handle (so isolation and partitions apply), aimed at the
// given client URLs (the host's own member when none are given).
func (h *Host) EtcdClient(endpoints ...string) (*clientv3.Client, error) {
	tlsCfg, err := h.etcdClientTLS()
	if err != nil {
		return nil, err
	}
	if len(endpoints) == 0 {
		endpoints = []string{h.ClientURL()}
	}
	d := h.Handle()
	return clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		TLS:         tlsCfg,
		DialTimeout: 2 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return d.DialContext(ctx, "tcp", addr)
		})},
	})
}

// CreateBootstrapToken writes a bootstrap-token Secret through cs in the given
// extra groups (for example "system:bootstrappers:stratum:control-plane") and
// returns "<id>.<secret>". expires may be in the past: a token created already
// expired, as the scenarios need.
func CreateBootstrapToken(ctx context.Context, cs kubernetes.Interface, groups []string, expires time.Time) (string, error) {
	id, secret := randToken(6), randToken(16)
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "bootstrap-token-" + id, Namespace: "kube-system"},
		Type:       corev1.SecretTypeBootstrapToken,
		StringData: map[string]string{
			"token-id":                       id,
			"token-secret":                   secret,
			"expiration":                     expires.UTC().Format(time.RFC3339),
			"usage-bootstrap-authentication": "true",
			"usage-bootstrap-signing":        "true",
		},
	}
	if len(groups) > 0 {
		s.StringData["auth-extra-groups"] = joinComma(groups)
	}
	if _, err := cs.CoreV1().Secrets("kube-system").Create(ctx, s, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("create bootstrap token %s: %w", id, err)
	}
	return id + "." + secret, nil
}

func joinComma(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += ","
		}
		out += x
	}
	return out
}

const tokenChars = "0123456789abcdefghijklmnopqrstuvwxyz"

func randToken(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	for i := range b {
		b[i] = tokenChars[int(b[i])%len(tokenChars)]
	}
	return string(b)
}
