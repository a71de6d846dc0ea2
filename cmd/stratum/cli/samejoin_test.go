package cli

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"stratum.dev/stratum/sim"
)

// TestTheSameJoinCommandOnTwoMachinesAtOnce is a playbook running the join
// command exactly as `token create` printed it on two machines at once. Both
// take the maintenance fence as the same holder (the token), and etcd admits
// one learner at a time, so one join may wait for the other or lose the
// fence to it. What must hold, judged from outside: each join either joins
// (exit 0) or is refused with nothing changed (exit 3, no member added,
// nothing left on its machine) and joins when run again; then the cluster
// has three started voters, each joined machine's apiserver and the VIP
// answer a client that trusts only the cluster CA, neither join warned about
// the fence, and the fence is free for the next operation (a rekey's dry run
// on cp1 would take it).
func TestTheSameJoinCommandOnTwoMachinesAtOnce(t *testing.T) {
	t.Parallel() // its own simulated cluster or host
	c, join := upWithPrintedJoin(t, 3)
	cp1, cp2, cp3 := c.Hosts()[0], c.Hosts()[1], c.Hosts()[2]
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	type result struct {
		code        int
		out, errOut string
	}
	joiners := []*sim.Host{cp2, cp3}
	results := make([]result, len(joiners))
	var wg sync.WaitGroup
	for i, h := range joiners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, out, errOut := runCLI(t, on(h), join...)
			results[i] = result{code, out, errOut}
		}()
	}
	wg.Wait()

	for i, h := range joiners {
		r := results[i]
		t.Logf("%s: exit %d\n%s%s", h.Name(), r.code, r.out, r.errOut)
		switch r.code {
		case ExitOK:
		case ExitRefused:
			if m := membersWithPeerURL(ctx, t, cp1, h.PeerURL()); m != 0 {
				t.Fatalf("%s's join was refused but left %d members with its peer URL", h.Name(), m)
			}
			if left := filesUnder(t, h.Root()); len(left) != 0 && !onlyRuntime(left) {
				t.Fatalf("%s's refused join left files: %v", h.Name(), keysOf(left))
			}
			code, out, errOut := runCLI(t, on(h), join...)
			if code != ExitOK {
				t.Fatalf("%s: the same join again after its refusal: exit %d\n%s\n%s", h.Name(), code, out, errOut)
			}
			r = result{code, out, errOut}
		default:
			t.Fatalf("%s: the join run beside another exited %d, want 0 or a refusal (3)\n%s\n%s", h.Name(), r.code, r.out, r.errOut)
		}
		if strings.Contains(r.errOut, "maintenance fence") {
			t.Errorf("%s's join succeeded but its stderr speaks of the fence:\n%s", h.Name(), r.errOut)
		}
	}

	got := memberTable(ctx, t, cp1)
	want := fmt.Sprintf("%s voter started; %s voter started; %s voter started", cp1.PeerURL(), cp2.PeerURL(), cp3.PeerURL())
	if got != want {
		t.Fatalf("members after both joins: %s\nwant %s", got, want)
	}
	for _, h := range joiners {
		servesWithClusterCA(ctx, t, h)
	}
	cfg, err := c.VIPConfig()
	if err != nil {
		t.Fatal(err)
	}
	readyz(ctx, t, "through the VIP", cfg)
	if code, out, errOut := runCLI(t, on(cp1), "certs", "rekey", "--dry-run"); code != ExitOK {
		t.Fatalf("certs rekey --dry-run after both joins: exit %d (the fence still held?)\n%s\n%s", code, out, errOut)
	}
}

// membersWithPeerURL counts the members with peerURL, seen from from's member.
func membersWithPeerURL(ctx context.Context, t *testing.T, from *sim.Host, peerURL string) int {
	t.Helper()
	count := 0
	for _, m := range members(ctx, t, from) {
		for _, u := range m.PeerURLs {
			if u == peerURL {
				count++
			}
		}
	}
	return count
}
