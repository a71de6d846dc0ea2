package ha_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/kubeconfig"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/pki"
	"stratum.dev/stratum/internal/version"
	"stratum.dev/stratum/sim"
)

// TestRenewCertsRefusedWithAMemberDown against three real etcd members, cp3's
// crashed (a dead disk waiting for its replacement): `certs renew` on cp2
// would restart cp2's etcd and leave one voter of three running, the quorum
// lost for the restart (and for good if it did not come back), so it is
// refused for the cluster's health with nothing written and cp2's etcd not
// restarted. Once cp2's own etcd serving certificate has expired, the
// expiry is presumed to be what makes the cluster unhealthy (every control
// plane's expire the same day): the renewal goes ahead without the check,
// restarts cp2's etcd onto the renewed certificates, and cp1 and cp2 are a
// quorum again.
func TestRenewCertsRefusedWithAMemberDown(t *testing.T) {
	t.Parallel() // its own simulated cluster
	c := sim.Start(t, sim.Config{ControlPlanes: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cp2 := c.Host("cp2")
	d := cp2.Handle()
	var progress []string
	n := ha.NewNode(ha.Env{Host: d, Checkpoint: d.Checkpoint, Progress: func(l string) { progress = append(progress, l) }})
	files := func() map[string][]byte {
		t.Helper()
		out := map[string][]byte{}
		paths := []string{}
		for _, name := range pki.NodeLeafNames() {
			paths = append(paths, version.PKIFile(name))
		}
		for _, name := range kubeconfig.Names() {
			paths = append(paths, version.Kubeconfig(name))
		}
		for _, p := range paths {
			b, err := d.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			out[p] = b
		}
		return out
	}
	etcdRestarts := func(since int) []string {
		var out []string
		for _, e := range c.Events().Events()[since:] {
			if e.Host == cp2.Name() && e.Kind == "service" && strings.HasPrefix(e.What, "etcd ") {
				out = append(out, e.What)
			}
		}
		return out
	}

	c.Host("cp3").CrashEtcd()
	before := files()
	from := len(c.Events().Events())
	// The node state is read under the node's maintenance lock: what the
	// leaves cover and the kubeconfigs name is the state a repoint or a VIP
	// adoption just before left, not the one before them.
	probe := &lockProbe{Handle: d, reads: nodestate.Path}
	written, restarted, err := ha.NewNode(ha.Env{Host: probe}).RenewCerts(ctx)
	if !ha.IsRefusal(err) || !errors.Is(err, ha.ErrClusterUnhealthy) {
		t.Fatalf("certs renew on cp2 with cp3 crashed: wrote %v, restarted %v, %v; want a refusal for the cluster's health", written, restarted, err)
	}
	if probe.probed == 0 || len(probe.unlocked) > 0 {
		t.Fatalf("certs renew read the node state %d times, %v with the node's maintenance lock free", probe.probed, probe.unlocked)
	}
	for _, want := range []string{ha.EtcdEndpoint(c.Host("cp3").IP().String()), "nothing was changed", "stratum etcd health", "stratum etcd member remove NAME"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not say %q: %v", want, err)
		}
	}
	for p, b := range files() {
		if !bytes.Equal(b, before[p]) {
			t.Errorf("the refused renewal changed %s", p)
		}
	}
	if got := etcdRestarts(from); len(got) != 0 || !cp2.EtcdRunning() {
		t.Fatalf("the refused renewal touched cp2's etcd: %v (running %v)", got, cp2.EtcdRunning())
	}

	// cp2's etcd serving certificate expired (issued 400 days ago): the
	// renewal is exempt from the check.
	shared := c.Shared()
	old, _, err := pki.RenewNodeLeaves(shared, cp2.Name(), cp2.IP().AsSlice(), nil, time.Now().Add(-400*24*time.Hour), func(name string) ([]byte, error) {
		return d.ReadFile(version.PKIFile(name))
	})
	if err != nil {
		t.Fatal(err)
	}
	serverCrt := version.PKIFile(pki.EtcdServerLeaf + ".crt")
	if err := d.WriteFile(serverCrt, old[pki.EtcdServerLeaf+".crt"], 0o600); err != nil {
		t.Fatal(err)
	}
	from = len(c.Events().Events())
	written, restarted, err = n.RenewCerts(ctx)
	if err != nil || !slices.Contains(restarted, ha.ServiceEtcd) || !slices.Contains(written, serverCrt) {
		t.Fatalf("certs renew on cp2 whose etcd certificate expired, cp3 crashed: wrote %v, restarted %v, %v; want it renewed and etcd restarted", written, restarted, err)
	}
	if !slices.ContainsFunc(progress, func(l string) bool {
		return strings.Contains(l, "etcd/server.crt on ") && strings.Contains(l, "not checked")
	}) {
		t.Errorf("the exempt renewal did not say why it skipped the check: %q", progress)
	}
	if got := etcdRestarts(from); len(got) < 2 {
		t.Fatalf("the exempt renewal's etcd events on cp2: %v; want it stopped and started", got)
	}
	b, err := d.ReadFile(serverCrt)
	if err != nil {
		t.Fatal(err)
	}
	if crt, err := pki.ParseCert(b); err != nil || !crt.NotAfter.After(time.Now().Add(300*24*time.Hour)) {
		t.Fatalf("cp2's etcd server certificate after the renewal: %v; want one valid for a year", err)
	}
	ips := ipsOf(c, "cp1", "cp2")
	for {
		err := n.EtcdClusterHealthy(ctx, ips)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatal(fmt.Errorf("cp1 and cp2 after the renewal: %w", err))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestRenewWhoseRestartFailedSaysEtcdMayBeStopped: a renewal whose restart
// of etcd onto the renewed certificates fails (the service manager cannot
// start it) says that etcd may be stopped and that `stratum up` starts it:
// a re-run restarts only what runs, so "re-run" alone would leave it so.
func TestRenewWhoseRestartFailedSaysEtcdMayBeStopped(t *testing.T) {
	t.Parallel() // its own simulated cluster
	c := sim.Start(t, sim.Config{ControlPlanes: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h := c.Host("cp1")
	h.BreakServices(errors.New("injected: the service manager cannot start etcd"))
	_, _, err := joinNodeOn(h).RenewCerts(ctx)
	h.MendServices()
	if err == nil || ha.IsRefusal(err) || !strings.Contains(err.Error(), "etcd may be stopped") || !strings.Contains(err.Error(), "`stratum up` if etcd is stopped") {
		t.Fatalf("a renewal whose etcd restart failed = %v; want a failure saying etcd may be stopped and `stratum up` starts it", err)
	}
	if h.EtcdRunning() {
		t.Fatal("etcd runs after a restart that failed; the test needs it stopped")
	}
}
