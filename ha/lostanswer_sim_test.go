package ha_test

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"stratum.dev/stratum/sim"
)

// answerDropper is a client transport that, armed, sends the next request of
// a method whose path ends in a suffix and then loses its answer, as a VIP
// moving right after the apiserver applied the request does: the client sees
// an unexpected EOF for a write that happened.
type answerDropper struct {
	rt http.RoundTripper

	mu      sync.Mutex
	method  string
	suffix  string
	dropped bool
}

// arm makes the next method request to a path ending in suffix lose its answer.
func (d *answerDropper) arm(method, suffix string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.method, d.suffix, d.dropped = method, suffix, false
}

// fired reports whether the armed request was sent and its answer dropped.
func (d *answerDropper) fired() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.dropped
}

func (d *answerDropper) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := d.rt.RoundTrip(req)
	d.mu.Lock()
	drop := err == nil && !d.dropped && d.method != "" && req.Method == d.method && strings.HasSuffix(req.URL.Path, d.suffix)
	if drop {
		d.dropped, d.method = true, ""
	}
	d.mu.Unlock()
	if !drop {
		return resp, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return nil, io.ErrUnexpectedEOF
}

// droppingAdmin is an admin clientset on h's own apiserver whose answers the
// returned dropper loses on demand.
func droppingAdmin(t *testing.T, h *sim.Host) (kubernetes.Interface, *answerDropper) {
	t.Helper()
	cfg, err := h.AdminConfig()
	if err != nil {
		t.Fatal(err)
	}
	d := &answerDropper{}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { d.rt = rt; return d })
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs, d
}

// TestMaintenanceFenceLostAnswers: each write of the fence — the take that
// creates the Lease, the take that updates it, a renewal and the release —
// whose answer is lost after the apiserver applied it is judged again and
// succeeds, as if the answer had come: the take holds the fence once (one
// transition), the renewal keeps it, and the release leaves it unheld and is
// not reported as a lost fence.
func TestMaintenanceFenceLostAnswers(t *testing.T) {
	t.Parallel() // its own simulated cluster
	e := startCerts(t, sim.Config{ControlPlanes: 1, APIServers: true})
	ctx := e.ctx
	cs, drop := droppingAdmin(t, e.cp1)
	leases := e.admin.CoordinationV1().Leases("kube-system")
	const lease = "/leases/stratum-maintenance"
	expect := func(what string) {
		t.Helper()
		if !drop.fired() {
			t.Fatalf("%s: no answer was dropped; the test no longer reaches the write it means to", what)
		}
	}

	_ = leases.Delete(ctx, "stratum-maintenance", metav1.DeleteOptions{})
	drop.arm(http.MethodPost, "/leases")
	f, err := e.node.TakeFence(ctx, cs, "join@cp1", 30*time.Second)
	expect("take creating the Lease")
	if err != nil {
		t.Fatalf("take creating the Lease, its answer lost: %v", err)
	}
	if err := f.Confirm(ctx); err != nil {
		t.Fatalf("confirm after a take whose create answer was lost: %v", err)
	}

	drop.arm(http.MethodPut, lease)
	if err := f.Renew(ctx); err != nil {
		t.Fatalf("renew, its answer lost: %v", err)
	}
	expect("renew")
	if err := f.Confirm(ctx); err != nil {
		t.Fatalf("confirm after a renewal whose answer was lost: %v", err)
	}

	drop.arm(http.MethodPut, lease)
	if err := f.Release(ctx); err != nil {
		t.Fatalf("release, its answer lost: %v", err)
	}
	expect("release")
	got, err := leases.Get(ctx, "stratum-maintenance", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := got.Spec.HolderIdentity; h != nil && *h != "" {
		t.Fatalf("after a release whose answer was lost, the fence is held by %q", *h)
	}
	transitions := int32(0)
	if got.Spec.LeaseTransitions != nil {
		transitions = *got.Spec.LeaseTransitions
	}

	drop.arm(http.MethodPut, lease)
	g, err := e.node.TakeFence(ctx, cs, "rekey@cp1", 30*time.Second)
	expect("take updating the Lease")
	if err != nil {
		t.Fatalf("take updating the Lease, its answer lost: %v", err)
	}
	if err := g.Confirm(ctx); err != nil {
		t.Fatalf("confirm after a take whose update answer was lost: %v", err)
	}
	got, err = leases.Get(ctx, "stratum-maintenance", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.LeaseTransitions == nil || *got.Spec.LeaseTransitions != transitions+1 {
		t.Errorf("one take, its answer lost and judged again, counted transitions %v, want %d", got.Spec.LeaseTransitions, transitions+1)
	}
}
