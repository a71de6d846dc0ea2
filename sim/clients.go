package sim

import (
	"context"
	"fmt"
	"net"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	bootstraputil "k8s.io/cluster-bootstrap/token/util"

	"stratum.dev/stratum/internal/kubeconfig"
	"stratum.dev/stratum/internal/token"
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

// EtcdMembers is the member list as etcdctl on this host gets it: through
// EtcdClient, from the host's own member.
func (h *Host) EtcdMembers(ctx context.Context) ([]*etcdserverpb.Member, error) {
	cli, err := h.EtcdClient()
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	ml, err := cli.MemberList(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: etcd member list: %w", h.name, err)
	}
	return ml.Members, nil
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
// expired, as the scenarios need. The token and its Secret are made as
// stratum's own mints make them (k8s.io/cluster-bootstrap's generator,
// token.NewSecret).
func CreateBootstrapToken(ctx context.Context, cs kubernetes.Interface, groups []string, expires time.Time) (string, error) {
	tok, err := bootstraputil.GenerateBootstrapToken()
	if err != nil {
		return "", fmt.Errorf("create bootstrap token: %w", err)
	}
	s, err := token.NewSecret(tok, groups, expires, "")
	if err != nil {
		return "", fmt.Errorf("create bootstrap token: %w", err)
	}
	if _, err := cs.CoreV1().Secrets(s.Namespace).Create(ctx, s, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("create bootstrap token Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	return tok, nil
}
