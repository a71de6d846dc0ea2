package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"stratum.dev/stratum/internal/certbundle"
	"stratum.dev/stratum/internal/host"
	"stratum.dev/stratum/internal/token"
	"stratum.dev/stratum/sim"
)

// vipMoveByteCuts is at how many points spread over a mint's bytes the test
// cuts.
const vipMoveByteCuts = 6

// vipMoveMeasures is how many uncut mints measure a mint's traffic, and
// vipMoveAnswerSlack how far past the most answers one had the cuts run.
const (
	vipMoveMeasures    = 3
	vipMoveAnswerSlack = 2
)

// TestTokenCreateSurvivesAVIPMove: `stratum token create --control-plane`
// whose connections through the VIP are all cut at a point of its traffic —
// a request half sent, or one applied whose answer is lost, as a VIP moving
// to another control plane cuts them — still mints exactly one grant. Cut at
// vipMoveByteCuts points spread over a mint's bytes, and in place of each of
// its answers in turn, it exits 0 and prints a join command; the cluster, read by a client of its own, then
// holds that token and no other new one, the grant's entry in
// stratum-certs, and the maintenance fence released, and the command warned
// of nothing. The join command one
// cut mint printed, run as printed on a spare host, makes it a control plane
// that serves with only the cluster CA.
func TestTokenCreateSurvivesAVIPMove(t *testing.T) {
	t.Parallel() // its own simulated cluster or host

	c, cp1, opts := upOneControlPlane(t, 2) // cp1, and cp2 to join
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// The cluster is read through cp1's own apiserver, not the VIP the
	// test cuts.
	cs, err := cp1.Admin()
	if err != nil {
		t.Fatal(err)
	}
	mint := func(what string) (id, join string) {
		t.Helper()
		code, out, errOut := runCLI(t, opts, "token", "create", "--control-plane")
		if code != ExitOK {
			t.Fatalf("token create %s: exit %d\n%s", what, code, errOut)
		}
		if strings.Contains(errOut, "level=WARN") {
			// A retried step must judge what its lost write did, not
			// warn of a failure that did not happen (a release found
			// done, say).
			t.Fatalf("token create %s succeeded with warnings:\n%s", what, errOut)
		}
		lines := printedCommandLines(out)
		if len(lines) == 0 {
			t.Fatalf("token create %s printed no join command:\n%s", what, out)
		}
		return mintedID(out), lines[0]
	}

	// An uncut mint measures the traffic a mint carries through the VIP.
	// Each mint's grant is revoked again, so every mint meets the same
	// cluster and carries the same traffic as the measured one: the grants'
	// Secret does not grow from one to the next.
	revoke := func(id string) {
		t.Helper()
		if code, _, errOut := runCLI(t, opts, "token", "delete", id); code != ExitOK {
			t.Fatalf("token delete %s: exit %d\n%s", id, code, errOut)
		}
	}
	// Uncut mints measure the traffic a mint carries: its bytes (the
	// fewest of vipMoveMeasures mints), and its answers, whose count
	// varies by a few (its clients' connections interleave): the fewest
	// and most of those mints.
	var span, fewest, most int64
	for i := 0; i < vipMoveMeasures; i++ {
		bytes, answers := c.VIPBytes(), c.VIPAnswers()
		id, _ := mint("uncut")
		bytes, answers = c.VIPBytes()-bytes, c.VIPAnswers()-answers
		revoke(id)
		// The fewest bytes measured: a mint slowed into a retry carries
		// more, and a cut placed by it could come after a normal mint ends.
		if i == 0 || bytes < span {
			span = bytes
		}
		if i == 0 || answers < fewest {
			fewest = answers
		}
		most = max(most, answers)
	}
	t.Logf("a mint carries at least %d bytes through the VIP, %d to %d answers", span, fewest, most)

	// The cuts: at points spread over the mint's bytes (mostly requests
	// half sent), then in place of each of its answers in turn (requests
	// applied, answers lost). Each cut counts from where it was armed; reached
	// says whether the mint's traffic got to its point.
	type cutAt struct {
		what    string
		arm     func() <-chan struct{}
		reached func() (bool, int64)
		answer  int64 // the answer a cut in place of one is at; 0 for a byte cut
	}
	var cuts []cutAt
	for i := int64(1); i <= vipMoveByteCuts; i++ {
		at := span * i / (vipMoveByteCuts + 1)
		var from int64
		cuts = append(cuts, cutAt{
			what:    fmt.Sprintf("cut at byte %d of %d", at, span),
			arm:     func() <-chan struct{} { from = c.VIPBytes(); return c.CutVIPConnectionsAt(from + at) },
			reached: func() (bool, int64) { n := c.VIPBytes() - from; return n >= at, n },
		})
	}
	// Answers are the forwarder's reads, so their count varies from mint to
	// mint by more than a few measured mints show: a cut in place of an
	// answer past a mint's last comes after it ended, and is then dropped.
	// The count runs to the most measured, and vipMoveAnswerSlack past, so
	// the last answers — the fence's release — are cut in some run.
	for k := int64(1); k <= most+vipMoveAnswerSlack; k++ {
		var from int64
		cuts = append(cuts, cutAt{
			what:    fmt.Sprintf("cut in place of answer %d (a mint has %d to %d)", k, fewest, most),
			arm:     func() <-chan struct{} { from = c.VIPAnswers(); return c.CutVIPAnswer(from + k) },
			reached: func() (bool, int64) { n := c.VIPAnswers() - from; return n >= k, n },
			answer:  k,
		})
	}
	// lastCut is the furthest answer a cut was made in place of, and
	// shortest the fewest answers an uncut mint carried (measured, or one
	// that ended before its cut): some mint had an answer at or past the
	// shortest mint's last one cut.
	var cutJoin string
	lastCut, shortest := int64(0), fewest
	for i, cut := range cuts {
		tokens := bootstrapTokens(ctx, t, cs)
		made := cut.arm()
		began := time.Now()
		id, join := mint(cut.what)
		t.Logf("token create %s: %s", cut.what, time.Since(began).Round(time.Millisecond))
		select {
		case <-made:
			lastCut = max(lastCut, cut.answer)
		default:
			c.DisarmVIPCut()
			reached, carried := cut.reached()
			switch {
			case reached:
				t.Fatalf("token create %s: the mint carried %d and the cut never came", cut.what, carried)
			case cut.answer == 0:
				t.Fatalf("token create %s: the mint carried only %d bytes, a measured one %d", cut.what, carried, span)
			}
			shortest = min(shortest, carried)
			t.Logf("token create %s: the mint ended first, after %d answers", cut.what, carried)
		}
		if want := append(tokens, id); !slices.Equal(sorted(bootstrapTokens(ctx, t, cs)), sorted(want)) {
			t.Fatalf("token create %s: bootstrap tokens %v, want those before (%v) and the printed %s only", cut.what, bootstrapTokens(ctx, t, cs), tokens, id)
		}
		certs, err := cs.CoreV1().Secrets("kube-system").Get(ctx, "stratum-certs", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := certs.Data[certbundle.GrantEntryPrefix+id]; !ok {
			t.Fatalf("token create %s: no grant entry for %s in stratum-certs", cut.what, id)
		}
		fence, err := cs.CoordinationV1().Leases("kube-system").Get(ctx, "stratum-maintenance", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if h := fence.Spec.HolderIdentity; h != nil && *h != "" {
			t.Fatalf("token create %s: the maintenance fence is still held by %q", cut.what, *h)
		}
		if i == len(cuts)/2 {
			cutJoin = join // kept, for the join below
		} else {
			revoke(id)
		}
	}

	if lastCut < shortest {
		t.Fatalf("the furthest cut was in place of answer %d, short of the %d answers the shortest mint carried: no mint's last answers were cut", lastCut, shortest)
	}

	cp2 := c.Hosts()[1]
	d2 := cp2.Handle()
	on2 := Options{Host: func() (host.Host, error) { return d2, nil }, Checkpoint: d2.Checkpoint}
	if code, out, errOut := runCLI(t, on2, strings.Fields(cutJoin)[1:]...); code != ExitOK {
		t.Fatalf("%s (printed by a cut mint), run on %s: exit %d\n%s\n%s", cutJoin, cp2.Name(), code, out, errOut)
	}
	servesWithClusterCA(ctx, t, cp2)
	renewHandsTheVIPOver(ctx, t, c)
}

// renewHandsTheVIPOver runs `stratum certs renew` on the VIP's holder of c,
// a cluster of two control planes: the holder's VIP candidate stops, which
// releases the VIP to the other, before its etcd and apiserver restart; it
// once restarted the VIP candidate last, so the VIP pointed at an apiserver
// restarting for seconds. Clients trusting only the cluster CA are then
// served through the VIP.
func renewHandsTheVIPOver(ctx context.Context, t *testing.T, c *sim.Cluster) {
	t.Helper()
	holder := c.VIPHolder()
	if holder == nil {
		t.Fatal("no control plane holds the VIP")
	}
	from := len(c.Events().Events())
	code, out, errOut := runCLI(t, on(holder), "certs", "renew")
	if code != ExitOK || !strings.Contains(out, "restarted onto them: etcd, kube-apiserver, kube-vip") || !strings.Contains(out, "handing the VIP over") {
		t.Fatalf("certs renew on the VIP's holder %s: exit %d\n%s\n%s", holder.Name(), code, out, errOut)
	}
	released, restarted := -1, -1
	for i, e := range c.Events().Events()[from:] {
		switch {
		case e.Host != holder.Name():
		case released < 0 && e.Kind == "vip" && strings.Contains(e.What, "released the VIP"):
			released = i
		case restarted < 0 && e.Kind == "service" && (strings.HasPrefix(e.What, "etcd stopped") || strings.HasPrefix(e.What, "kube-apiserver stopped")):
			restarted = i
		}
	}
	if released < 0 || restarted < 0 || released > restarted {
		t.Fatalf("certs renew on the VIP's holder %s: its VIP released at event %d, its first restart at event %d; want the VIP released first:\n%s", holder.Name(), released, restarted, c.Events())
	}
	cfg, err := c.VIPConfig()
	if err != nil {
		t.Fatal(err)
	}
	readyzWithin(ctx, t, "the VIP after the renewal", cfg, time.Minute)
}

// bootstrapTokens is the IDs of the cluster's bootstrap tokens.
func bootstrapTokens(ctx context.Context, t *testing.T, cs kubernetes.Interface) []string {
	t.Helper()
	list, err := token.List(ctx, cs, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, i := range list {
		ids = append(ids, i.ID)
	}
	return ids
}

func sorted(s []string) []string { s = slices.Clone(s); slices.Sort(s); return s }

// servesWithClusterCA checks h's own apiserver answers /readyz to a client
// that trusts only the cluster CA, as a user's would.
func servesWithClusterCA(ctx context.Context, t *testing.T, h *sim.Host) {
	t.Helper()
	cfg, err := h.AdminConfig() // the kubeconfig's CA: the cluster CA only
	if err != nil {
		t.Fatal(err)
	}
	readyz(ctx, t, h.Name()+"'s apiserver", cfg)
}

// readyz checks that the apiserver cfg names answers /readyz to cfg's
// client, one whose CA is the cluster CA only; where says which server.
func readyz(ctx context.Context, t *testing.T, where string, cfg *rest.Config) {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err != nil {
		t.Fatalf("%s: /readyz with only the cluster CA: %v (%s)", where, err, body)
	}
}
