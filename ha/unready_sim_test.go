package ha_test

import (
	"crypto/tls"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/kubeconfig"
	"stratum.dev/stratum/internal/pki"
	"stratum.dev/stratum/internal/token"
	"stratum.dev/stratum/internal/version"
	"stratum.dev/stratum/sim"
)

// TestJoinClientWaitsOutAStartingAPIServer: a join's requests, sent to a
// kube-apiserver the moment its port opens after a restart (serving, its
// informers not yet synced), get their answers once the server is ready,
// not its refusals, and the join says that it waited: the client ha builds
// from the join's bootstrap kubeconfig, whose token the server refuses
// (401), the node's admin client, whose certificate its RBAC authorizer
// denies (403), and discovery's anonymous fetch of cluster-info, which its RBAC
// authorizer denies (403).
func TestJoinClientWaitsOutAStartingAPIServer(t *testing.T) {
	t.Parallel() // its own simulated cluster
	e := startCerts(t, sim.Config{ControlPlanes: 1, APIServers: true})
	ctx := e.ctx
	if err := e.node.GrantCertsReader(ctx, e.admin); err != nil {
		t.Fatal(err)
	}
	tok, err := sim.CreateBootstrapToken(ctx, e.admin, []string{token.ControlPlaneGroup}, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	e.waitAuthenticated(tok)
	kc, err := kubeconfig.ForToken(e.cp1.APIServerURL(), e.caPEM, tok, token.BootstrapUser)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var said []string
	n := ha.NewNode(ha.Env{Host: e.cp1.Handle(), Progress: func(l string) {
		mu.Lock()
		defer mu.Unlock()
		said = append(said, l)
	}})
	cfg, err := n.RESTConfigOf(kc)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	saidSo := func(words string) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			for _, l := range said {
				if strings.Contains(l, words) {
					return true
				}
			}
			return false
		}
	}
	// askAsItStarts restarts cp1's kube-apiserver and asks the moment its
	// port accepts, until the ask met the server refusing it before it was
	// ready (met), at most 3 restarts; each ask must get its answer.
	askAsItStarts := func(what string, ask func() error, met func() bool) {
		t.Helper()
		for restart := 1; ; restart++ {
			ready, err := e.cp1.RestartAPIServerUnready(ctx)
			if err != nil {
				t.Fatal(err)
			}
			err = ask()
			if serr := <-ready; serr != nil {
				t.Fatalf("restart cp1's kube-apiserver: %v", serr)
			}
			if err != nil {
				mu.Lock()
				t.Fatalf("%s, sent to cp1's kube-apiserver as it began to serve after restart %d: %v, want its answer once it was ready (said: %q)", what, restart, err, said)
			}
			if met() {
				return
			}
			if restart == 3 {
				mu.Lock()
				t.Fatalf("in 3 restarts %s never met the apiserver refusing it before it was ready, so this shows nothing (said: %q)", what, said)
			}
		}
	}
	askAsItStarts("the join's client", func() error {
		_, err := cs.CoordinationV1().Leases("kube-system").Get(ctx, ha.FenceLeaseName, metav1.GetOptions{})
		return err
	}, saidSo("while not ready"))
	// The node's admin credential, whose group RBAC binds to cluster-admin
	// (not system:masters, which no authorizer is asked about): its
	// certificate is authenticated at once, and the authorizer denies it
	// (403) until its bindings' informer has synced.
	mu.Lock()
	said = nil
	mu.Unlock()
	adminKC, err := e.cp1.Files().ReadFile(version.Kubeconfig(kubeconfig.Admin))
	if err != nil {
		t.Fatal(err)
	}
	adminCfg, err := n.RESTConfigOf(adminKC)
	if err != nil {
		t.Fatal(err)
	}
	adminCfg.Host = e.cp1.APIServerURL()
	adminCS, err := kubernetes.NewForConfig(adminCfg)
	if err != nil {
		t.Fatal(err)
	}
	askAsItStarts("the node's admin client", func() error {
		_, err := adminCS.CoreV1().ConfigMaps("kube-public").Get(ctx, "cluster-info", metav1.GetOptions{})
		return err
	}, saidSo("403 Forbidden while not ready"))
	hash, err := pki.CAHash(e.caPEM)
	if err != nil {
		t.Fatal(err)
	}
	// Discovery is sent once the server answers HTTP at all: a connection
	// lost at its very start would be the wait's one progress line for 5 s
	// (waitReporter's pace), and the refusal after it unsaid.
	anonymous := &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // a probe of the server's state, trusting nothing it says
	askAsItStarts("the join's discovery", func() error {
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if resp, err := anonymous.Get(e.cp1.APIServerURL() + "/readyz"); err == nil {
				resp.Body.Close()
				break
			}
		}
		ca, err := n.FetchCAOf(ctx, ha.JoinOptions{Server: e.cp1.APIServerURL(), CAHash: hash})
		if err == nil && len(ca) == 0 {
			err = errors.New("no CA")
		}
		return err
	}, saidSo("until it is ready"))
}
