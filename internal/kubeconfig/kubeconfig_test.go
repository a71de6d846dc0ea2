package kubeconfig

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"stratum.dev/stratum/internal/pki"
)

const server = "https://10.0.0.1:6443"

// testCA caches one cluster CA for the tests, issued now so a real TLS
// handshake accepts its leaves.
var testCA = sync.OnceValues(func() (*pki.CA, error) { return pki.NewCA("stratum-ca", time.Now()) })

func mustCA(t *testing.T) *pki.CA {
	t.Helper()
	ca, err := testCA()
	if err != nil {
		t.Fatalf("NewCA: %v", err)
	}
	return ca
}

func mustLeaf(t *testing.T, ca *pki.CA, spec pki.LeafSpec) (certPEM, keyPEM []byte) {
	t.Helper()
	c, k, err := ca.Issue(spec, time.Now())
	if err != nil {
		t.Fatalf("Issue: %v", err)
	}
	return c, k
}

func mustLoad(t *testing.T, kc []byte) *clientcmdapi.Config {
	t.Helper()
	cfg, err := clientcmd.Load(kc)
	if err != nil {
		t.Fatalf("clientcmd.Load: %v\n%s", err, kc)
	}
	return cfg
}

// certKubeconfig and tokenKubeconfig are valid kubeconfigs of each kind.
func certKubeconfig(t *testing.T) []byte {
	t.Helper()
	ca := mustCA(t)
	c, k := mustLeaf(t, ca, pki.LeafSpec{CommonName: "alice", Client: true})
	kc, err := ForCert(server, ca.CertPEM, c, k, "alice")
	if err != nil {
		t.Fatalf("ForCert: %v", err)
	}
	return kc
}

func tokenKubeconfig(t *testing.T) []byte {
	t.Helper()
	kc, err := ForToken(server, mustCA(t).CertPEM, "abcdef.0123456789abcdef", "tls-bootstrap-token-user")
	if err != nil {
		t.Fatalf("ForToken: %v", err)
	}
	return kc
}

func TestForCertAndForTokenRoundTrip(t *testing.T) {
	ca := mustCA(t)
	c, k := mustLeaf(t, ca, pki.LeafSpec{CommonName: "alice", Client: true})
	for _, tc := range []struct {
		name     string
		build    func() ([]byte, error)
		user     string
		wantAuth clientcmdapi.AuthInfo
	}{
		{"cert", func() ([]byte, error) { return ForCert(server, ca.CertPEM, c, k, "alice") },
			"alice", clientcmdapi.AuthInfo{ClientCertificateData: c, ClientKeyData: k}},
		{"token", func() ([]byte, error) { return ForToken(server, ca.CertPEM, "abcdef.0123456789abcdef", "bob") },
			"bob", clientcmdapi.AuthInfo{Token: "abcdef.0123456789abcdef"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kc, err := tc.build()
			if err != nil {
				t.Fatalf("build: %v", err)
			}
			cfg := mustLoad(t, kc)
			if cfg.CurrentContext != "stratum" {
				t.Errorf("current context %q, want stratum", cfg.CurrentContext)
			}
			if len(cfg.Clusters) != 1 || len(cfg.AuthInfos) != 1 || len(cfg.Contexts) != 1 {
				t.Fatalf("%d clusters, %d users, %d contexts; want one each", len(cfg.Clusters), len(cfg.AuthInfos), len(cfg.Contexts))
			}
			cl := cfg.Clusters["stratum"]
			if cl == nil || cl.Server != server || !bytes.Equal(cl.CertificateAuthorityData, ca.CertPEM) || cl.CertificateAuthority != "" {
				t.Errorf("cluster %+v, want server %s with the CA embedded", cl, server)
			}
			kctx := cfg.Contexts["stratum"]
			if kctx == nil || kctx.Cluster != "stratum" || kctx.AuthInfo != tc.user {
				t.Errorf("context %+v, want cluster stratum, user %s", kctx, tc.user)
			}
			a := cfg.AuthInfos[tc.user]
			if a == nil {
				t.Fatalf("no user %q", tc.user)
			}
			if !bytes.Equal(a.ClientCertificateData, tc.wantAuth.ClientCertificateData) ||
				!bytes.Equal(a.ClientKeyData, tc.wantAuth.ClientKeyData) ||
				a.Token != tc.wantAuth.Token || a.ClientCertificate != "" || a.ClientKey != "" {
				t.Errorf("user %q credentials differ from the ones given", tc.user)
			}
			if got, err := Server(kc); err != nil || got != server {
				t.Errorf("Server = %q, %v; want %s", got, err, server)
			}
		})
	}
}

func TestForRefusesBadInput(t *testing.T) {
	ca := mustCA(t)
	c, k := mustLeaf(t, ca, pki.LeafSpec{CommonName: "alice", Client: true})
	for _, tc := range []struct {
		name  string
		build func() ([]byte, error)
	}{
		{"empty server", func() ([]byte, error) { return ForCert("", ca.CertPEM, c, k, "u") }},
		{"http server", func() ([]byte, error) { return ForCert("http://10.0.0.1:6443", ca.CertPEM, c, k, "u") }},
		{"server without scheme", func() ([]byte, error) { return ForToken("10.0.0.1:6443", ca.CertPEM, "t", "u") }},
		{"server without host", func() ([]byte, error) { return ForToken("https://", ca.CertPEM, "t", "u") }},
		{"no CA", func() ([]byte, error) { return ForCert(server, nil, c, k, "u") }},
		{"no certificate", func() ([]byte, error) { return ForCert(server, ca.CertPEM, nil, k, "u") }},
		{"no key", func() ([]byte, error) { return ForCert(server, ca.CertPEM, c, nil, "u") }},
		{"no user", func() ([]byte, error) { return ForCert(server, ca.CertPEM, c, k, "") }},
		{"no token", func() ([]byte, error) { return ForToken(server, ca.CertPEM, "", "u") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if kc, err := tc.build(); err == nil {
				t.Errorf("built\n%s", kc)
			}
		})
	}
}

// multiCluster is a kubeconfig written by someone else: two clusters, two
// users, the second context current.
func multiCluster(t *testing.T) []byte {
	t.Helper()
	ca := mustCA(t)
	c, k := mustLeaf(t, ca, pki.LeafSpec{CommonName: "alice", Client: true})
	cfg := clientcmdapi.NewConfig()
	for _, n := range []string{"one", "two"} {
		cl := clientcmdapi.NewCluster()
		cl.Server = "https://" + n + ".example:6443"
		cl.CertificateAuthorityData = ca.CertPEM
		cfg.Clusters[n] = cl
	}
	cfg.AuthInfos["alice"] = &clientcmdapi.AuthInfo{ClientCertificateData: c, ClientKeyData: k}
	cfg.AuthInfos["bob"] = &clientcmdapi.AuthInfo{Token: "bobs-token"}
	cfg.Contexts["a"] = &clientcmdapi.Context{Cluster: "one", AuthInfo: "alice"}
	cfg.Contexts["b"] = &clientcmdapi.Context{Cluster: "two", AuthInfo: "bob"}
	cfg.CurrentContext = "b"
	kc, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	return kc
}

func TestServer(t *testing.T) {
	for _, tc := range []struct {
		name    string
		kc      []byte
		want    string
		wantErr bool
	}{
		{"cert", certKubeconfig(t), server, false},
		{"current context of several", multiCluster(t), "https://two.example:6443", false},
		{"empty", nil, "", true},
		{"garbage", []byte("garbage"), "", true},
		{"not yaml", []byte(":\n\t- ]["), "", true},
		{"no current context", []byte("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://x\n"), "", true},
		{"current context undefined", []byte("apiVersion: v1\nkind: Config\ncurrent-context: nope\n"), "", true},
		{"context names a missing cluster", []byte("apiVersion: v1\nkind: Config\ncurrent-context: c\ncontexts:\n- name: c\n  context:\n    cluster: gone\n    user: u\n"), "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Server(tc.kc)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("Server = %q, %v; want %q, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestRepoint(t *testing.T) {
	const vip = "https://10.0.0.100:6443"
	for _, tc := range []struct {
		name string
		kc   []byte
	}{
		{"cert", certKubeconfig(t)},
		{"token", tokenKubeconfig(t)},
		{"several clusters", multiCluster(t)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			orig := bytes.Clone(tc.kc)
			out, err := Repoint(tc.kc, vip)
			if err != nil {
				t.Fatalf("Repoint: %v", err)
			}
			if !bytes.Equal(tc.kc, orig) {
				t.Error("Repoint changed its input")
			}
			before, after := mustLoad(t, tc.kc), mustLoad(t, out)
			if !reflect.DeepEqual(before.AuthInfos, after.AuthInfos) {
				t.Error("users changed")
			}
			if !reflect.DeepEqual(before.Contexts, after.Contexts) || before.CurrentContext != after.CurrentContext {
				t.Error("contexts changed")
			}
			if len(after.Clusters) != len(before.Clusters) {
				t.Fatalf("%d clusters, want %d", len(after.Clusters), len(before.Clusters))
			}
			for name, b := range before.Clusters {
				a := after.Clusters[name]
				if a == nil || a.Server != vip {
					t.Errorf("cluster %s: %+v, want server %s", name, a, vip)
					continue
				}
				if b.Server == vip {
					t.Fatalf("cluster %s already pointed at the VIP; the test proves nothing", name)
				}
				a.Server = b.Server
				if !reflect.DeepEqual(a, b) {
					t.Errorf("cluster %s changed beyond its server", name)
				}
			}
			if got, err := Server(out); err != nil || got != vip {
				t.Errorf("Server after Repoint = %q, %v; want %s", got, err, vip)
			}
		})
	}
}

func TestRepointRefuses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		kc     []byte
		server string
	}{
		{"bad server", certKubeconfig(t), "10.0.0.100:6443"},
		{"empty kubeconfig", nil, "https://10.0.0.100:6443"},
		{"garbage kubeconfig", []byte("garbage"), "https://10.0.0.100:6443"},
		{"no clusters", []byte("apiVersion: v1\nkind: Config\n"), "https://10.0.0.100:6443"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if out, err := Repoint(tc.kc, tc.server); err == nil {
				t.Errorf("Repoint succeeded:\n%s", out)
			}
		})
	}
}

func TestTokenOf(t *testing.T) {
	for _, tc := range []struct {
		name    string
		kc      []byte
		want    string
		wantErr bool
	}{
		{"token", tokenKubeconfig(t), "abcdef.0123456789abcdef", false},
		{"current user of several", multiCluster(t), "bobs-token", false},
		{"client certificate only", certKubeconfig(t), "", true},
		{"token file only", []byte("apiVersion: v1\nkind: Config\ncurrent-context: c\ncontexts:\n- name: c\n  context:\n    cluster: x\n    user: u\nusers:\n- name: u\n  user:\n    tokenFile: /tmp/token\n"), "", true},
		{"user undefined", []byte("apiVersion: v1\nkind: Config\ncurrent-context: c\ncontexts:\n- name: c\n  context:\n    cluster: x\n    user: u\n"), "", true},
		{"empty", nil, "", true},
		{"garbage", []byte("garbage"), "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := TokenOf(tc.kc)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("TokenOf = %q, %v; want %q, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

// TestWithoutCredentials: every user's credentials go (a token, a client
// certificate and key, several users), the cluster, its server and CA stay;
// a kubeconfig without credentials comes back unchanged and says so; one
// that does not parse is an error.
func TestWithoutCredentials(t *testing.T) {
	for _, tc := range []struct {
		name string
		kc   []byte
	}{
		{"token", tokenKubeconfig(t)},
		{"client certificate", certKubeconfig(t)},
		{"several users", multiCluster(t)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			server, err := Server(tc.kc)
			if err != nil {
				t.Fatal(err)
			}
			ca, _ := CAOf(tc.kc)
			out, held, err := WithoutCredentials(tc.kc)
			if err != nil || !held {
				t.Fatalf("WithoutCredentials = held %t, %v; want held, no error", held, err)
			}
			for _, secret := range []string{"token:", "client-certificate-data", "client-key-data", "bobs-token", "abcdef.0123456789abcdef"} {
				if strings.Contains(string(out), secret) {
					t.Errorf("%q is left in:\n%s", secret, out)
				}
			}
			if got, err := Server(out); err != nil || got != server {
				t.Errorf("server after = %q, %v; want %q", got, err, server)
			}
			if got, _ := CAOf(out); !bytes.Equal(got, ca) {
				t.Errorf("CA data changed")
			}
			again, held, err := WithoutCredentials(out)
			if err != nil || held || !bytes.Equal(again, out) {
				t.Errorf("WithoutCredentials of a kubeconfig without credentials = held %t, %v, changed %t; want it as it was", held, err, !bytes.Equal(again, out))
			}
		})
	}
	if _, _, err := WithoutCredentials([]byte("garbage")); err == nil {
		t.Error("WithoutCredentials of garbage: no error")
	}
}

// TestRESTConfigReachesServer makes real HTTPS requests with the REST config
// of each kind of kubeconfig to a server that trusts the cluster CA: the
// server must see the kubeconfig's client certificate or token.
func TestRESTConfigReachesServer(t *testing.T) {
	ca := mustCA(t)
	srvCert, srvKey := mustLeaf(t, ca, pki.LeafSpec{
		CommonName: "kube-apiserver", IPs: []net.IP{net.ParseIP("127.0.0.1")}, Server: true,
	})
	pair, err := tls.X509KeyPair(srvCert, srvKey)
	if err != nil {
		t.Fatal(err)
	}
	clientCAs := x509.NewCertPool()
	clientCAs.AddCert(ca.Cert)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.TLS != nil && len(r.TLS.VerifiedChains) > 0:
			_, _ = io.WriteString(w, "cert:"+r.TLS.VerifiedChains[0][0].Subject.CommonName)
		case r.Header.Get("Authorization") != "":
			_, _ = io.WriteString(w, r.Header.Get("Authorization"))
		default:
			http.Error(w, "anonymous", http.StatusUnauthorized)
		}
	}))
	srv.TLS = &tls.Config{
		Certificates: []tls.Certificate{pair},
		ClientCAs:    clientCAs,
		ClientAuth:   tls.VerifyClientCertIfGiven,
	}
	srv.StartTLS()
	defer srv.Close()

	c, k := mustLeaf(t, ca, pki.LeafSpec{CommonName: "alice", Client: true})
	certKC, err := ForCert(srv.URL, ca.CertPEM, c, k, "alice")
	if err != nil {
		t.Fatal(err)
	}
	tokenKC, err := ForToken(srv.URL, ca.CertPEM, "abcdef.0123456789abcdef", "bootstrap")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		kc   []byte
		want string
	}{
		{"cert", certKC, "cert:alice"},
		{"token", tokenKC, "Bearer abcdef.0123456789abcdef"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := RESTConfig(tc.kc)
			if err != nil {
				t.Fatalf("RESTConfig: %v", err)
			}
			if cfg.Host != srv.URL || !bytes.Equal(cfg.CAData, ca.CertPEM) {
				t.Errorf("host %q CA data %d bytes; want %s and the CA", cfg.Host, len(cfg.CAData), srv.URL)
			}
			if got := requestBody(t, cfg, srv.URL); got != tc.want {
				t.Errorf("server saw %q, want %q", got, tc.want)
			}
		})
	}
}

func requestBody(t *testing.T, cfg *rest.Config, url string) string {
	t.Helper()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatalf("HTTPClientFor: %v", err)
	}
	resp, err := hc.Get(url + "/whoami")
	if err != nil {
		t.Fatalf("GET: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET: %s: %s", resp.Status, body)
	}
	return string(body)
}

func TestRESTConfigRefusesBadInput(t *testing.T) {
	for name, kc := range map[string][]byte{
		"empty":              nil,
		"garbage":            []byte("garbage"),
		"no current context": []byte("apiVersion: v1\nkind: Config\n"),
	} {
		t.Run(name, func(t *testing.T) {
			if cfg, err := RESTConfig(kc); err == nil {
				t.Errorf("RESTConfig succeeded: %+v", cfg)
			}
		})
	}
}

func TestNodeKubeconfigs(t *testing.T) {
	ca := mustCA(t)
	other, err := pki.NewCA("other", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	kcs, err := NodeKubeconfigs(ca, server, time.Now())
	if err != nil {
		t.Fatalf("NodeKubeconfigs: %v", err)
	}
	if want := []string{"admin", "controller-manager", "scheduler"}; !slices.Equal(Names(), want) {
		t.Errorf("Names() = %v, want %v", Names(), want)
	}
	if got := slices.Sorted(func(yield func(string) bool) {
		for n := range kcs {
			if !yield(n) {
				return
			}
		}
	}); !slices.Equal(got, Names()) {
		t.Fatalf("kubeconfigs %v, want %v", got, Names())
	}
	for _, tc := range []struct {
		name, cn string
		org      []string
	}{
		{"admin", "kubernetes-admin", []string{"stratum:cluster-admins"}},
		{"controller-manager", "system:kube-controller-manager", nil},
		{"scheduler", "system:kube-scheduler", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kc := kcs[tc.name]
			if got, err := Server(kc); err != nil || got != server {
				t.Errorf("Server = %q, %v; want %s", got, err, server)
			}
			cfg, err := RESTConfig(kc)
			if err != nil {
				t.Fatalf("RESTConfig: %v", err)
			}
			if !bytes.Equal(cfg.CAData, ca.CertPEM) {
				t.Error("CA data is not the cluster CA")
			}
			if _, err := tls.X509KeyPair(cfg.CertData, cfg.KeyData); err != nil {
				t.Fatalf("client certificate and key are not a pair: %v", err)
			}
			crt, err := pki.ParseCert(cfg.CertData)
			if err != nil {
				t.Fatal(err)
			}
			if crt.Subject.CommonName != tc.cn || !slices.Equal(crt.Subject.Organization, tc.org) {
				t.Errorf("subject CN %q O %v, want CN %q O %v", crt.Subject.CommonName, crt.Subject.Organization, tc.cn, tc.org)
			}
			if kctx := mustLoad(t, kc).Contexts["stratum"]; kctx == nil || kctx.AuthInfo != tc.cn {
				t.Errorf("context %+v, want user %q", kctx, tc.cn)
			}
			for _, v := range []struct {
				ca   *pki.CA
				want bool
			}{{ca, true}, {other, false}} {
				roots := x509.NewCertPool()
				roots.AddCert(v.ca.Cert)
				_, err := crt.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
				if (err == nil) != v.want {
					t.Errorf("verify as a client against %q: %v, want ok=%v", v.ca.Cert.Subject.CommonName, err, v.want)
				}
			}
		})
	}
}

func TestNodeKubeconfigsRefuses(t *testing.T) {
	if _, err := NodeKubeconfigs(nil, server, time.Now()); err == nil {
		t.Error("NodeKubeconfigs without a CA succeeded")
	}
	if _, err := NodeKubeconfigs(mustCA(t), "http://x:6443", time.Now()); err == nil || !strings.Contains(err.Error(), "https") {
		t.Errorf("NodeKubeconfigs with an http server: %v, want a refusal naming https", err)
	}
}

// TestRESTConfigNeverUsesAProxy: with HTTPS_PROXY set, as a root shell's
// profile sets it on many corporate hosts, a client of RESTConfig still dials
// the server itself, never the proxy.
func TestRESTConfigNeverUsesAProxy(t *testing.T) {
	const proxy = "192.0.2.1:3128"
	for _, v := range []string{"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"} {
		t.Setenv(v, "http://"+proxy)
	}
	for _, v := range []string{"NO_PROXY", "no_proxy"} {
		t.Setenv(v, "")
	}
	cfg, err := RESTConfig(certKubeconfig(t))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Proxy == nil {
		t.Fatal("RESTConfig leaves Proxy nil: client-go then takes the proxy from the environment")
	}
	req, _ := http.NewRequest(http.MethodGet, server+"/version", nil)
	if u, err := cfg.Proxy(req); u != nil || err != nil {
		t.Fatalf("Proxy(%s) = %v, %v; want a direct connection", server, u, err)
	}
	var mu sync.Mutex
	var dialed []string
	cfg.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		mu.Lock()
		dialed = append(dialed, addr)
		mu.Unlock()
		return nil, errors.New("no network in this test")
	}
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := client.Get(server + "/version"); err == nil {
		resp.Body.Close()
	}
	mu.Lock()
	defer mu.Unlock()
	if len(dialed) == 0 || slices.ContainsFunc(dialed, func(a string) bool { return a != "10.0.0.1:6443" }) {
		t.Fatalf("the client dialed %v; want the server 10.0.0.1:6443 alone, never the proxy %s", dialed, proxy)
	}
}
