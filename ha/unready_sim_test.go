package ha_test

import (
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/kubeconfig"
	"stratum.dev/stratum/internal/token"
	"stratum.dev/stratum/sim"
)

// TestJoinClientWaitsOutAStartingAPIServer: a client ha builds from a
// join's bootstrap kubeconfig, sent to a kube-apiserver the moment its port
// opens after a restart (serving, its informers not yet synced, so it
// refuses bootstrap tokens), gets its answer once the server is ready, not
// the refusal, and says that it waited.
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
	u, err := url.Parse(e.cp1.APIServerURL())
	if err != nil {
		t.Fatal(err)
	}
	waited := func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, l := range said {
			if strings.Contains(l, "while not ready") {
				return true
			}
		}
		return false
	}
	for restart := 1; ; restart++ {
		if err := e.cp1.KillAPIServer(); err != nil {
			t.Fatal(err)
		}
		started := make(chan error, 1)
		go func() { started <- e.cp1.StartAPIServer(ctx) }()
		// The moment its port accepts: serving, not ready.
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
			if c, err := net.DialTimeout("tcp", u.Host, time.Second); err == nil {
				c.Close()
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("cp1's restarted kube-apiserver never listened on %s", u.Host)
			}
		}
		_, err := cs.CoordinationV1().Leases("kube-system").Get(ctx, ha.FenceLeaseName, metav1.GetOptions{})
		if serr := <-started; serr != nil {
			t.Fatalf("restart cp1's kube-apiserver: %v", serr)
		}
		if err != nil {
			t.Fatalf("the join's client, sent to cp1's kube-apiserver as it began to serve after restart %d: %v, want the Lease once it was ready (said: %q)", restart, err, said)
		}
		if waited() {
			return
		}
		if restart == 3 {
			t.Fatalf("in 3 restarts the client never met the apiserver refusing it before it was ready, so this shows nothing (said: %q)", said)
		}
	}
}
