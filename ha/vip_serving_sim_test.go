package ha_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/assets/assetstest"
	"stratum.dev/stratum/internal/host"
	"stratum.dev/stratum/internal/syncbuf"
	"stratum.dev/stratum/sim"
)

// vipNeverTaken is a host whose VIP candidate starts and never takes the
// VIP: one without the right to add the address, say.
type vipNeverTaken struct{ *sim.Handle }

func (h vipNeverTaken) StartService(ctx context.Context, name string) error {
	if name == ha.ServiceVIP {
		return nil
	}
	return h.Handle.StartService(ctx, name)
}

// TestStartWaitsForTheVIPToServe: a start is up for its clients once the VIP
// serves this cluster, which the admin kubeconfig names. With a candidate
// that never takes it, the start ends with a warning naming the VIP and the
// address the control plane serves on, after the bound, and still publishes
// what joiners need (through its own apiserver); with one that does, the
// step is done and the VIP serves, as a client sees it.
func TestStartWaitsForTheVIPToServe(t *testing.T) {
	t.Parallel() // its own simulated cluster
	assetstest.Require(t)
	c := sim.Start(t, sim.Config{ControlPlanes: 1, APIServers: true, VIP: true})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp1 := c.Host("cp1")
	vip := c.VIPAddress().String()
	cp1.StopVIPCandidate()

	up := func(h host.Host) string {
		t.Helper()
		var progress syncbuf.Buffer
		d := cp1.Handle()
		n := ha.NewNode(ha.Env{Host: h, Checkpoint: d.Checkpoint, Progress: func(s string) { fmt.Fprintln(&progress, s) }})
		if _, err := n.Up(ctx, ha.BootstrapOptions{}); err != nil {
			t.Fatalf("stratum up on cp1: %v\n%s", err, progress.String())
		}
		return progress.String()
	}
	out := up(vipNeverTaken{cp1.Handle()})
	want := "VIP serving: not done (warning: the VIP " + vip + " does not serve this cluster after 10s"
	if !strings.Contains(out, want) || !strings.Contains(out, cp1.APIServerURL()) {
		t.Fatalf("stratum up with a VIP candidate that never takes the VIP did not warn %q naming %s:\n%s", want, cp1.APIServerURL(), out)
	}
	// What joiners need is published through cp1's own apiserver, which
	// serves, not through the VIP, which does not.
	if strings.Contains(out, "joins use what was published before") {
		t.Fatalf("stratum up with the VIP not served did not publish for joiners:\n%s", out)
	}
	if holder := c.VIPHolder(); holder != nil {
		t.Fatalf("the VIP is held by %s after a start whose candidate never took it", holder.Name())
	}

	out = up(cp1.Handle())
	if !strings.Contains(out, "VIP serving: done") {
		t.Fatalf("stratum up with a working VIP candidate did not report the VIP serving:\n%s", out)
	}
	if ok, err := joinNodeOn(cp1).VIPServes(ctx, vip); !ok {
		t.Fatalf("the VIP does not serve after a start that said it did: %v", err)
	}
}
