package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/host"
	"stratum.dev/stratum/sim"
)

// TestEtcdDefrag runs `stratum etcd defrag` as an operator does, against
// three real etcd members: its dry run, a refusal with a member down, the
// run itself (each member's line as it is done, the leader last), its JSON,
// and the NOSPACE alarm `etcd health` names and `etcd defrag` clears.
// TestDefragmentEtcd (ha) checks the databases shrink.
func TestEtcdDefrag(t *testing.T) {
	t.Parallel() // its own simulated cluster
	c := sim.Start(t, sim.Config{ControlPlanes: 3})
	d := c.Host("cp1").Handle()
	opts := Options{Host: func() (host.Host, error) { return d, nil }}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n := ha.NewNode(ha.Env{Host: d})
	var eps []string
	for _, name := range []string{"cp1", "cp2", "cp3"} {
		eps = append(eps, ha.EtcdEndpoint(c.Host(name).IP().String()))
	}
	cli, err := n.EtcdClient(eps...)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	code, out, errOut := runCLI(t, opts, "etcd", "defrag", "--dry-run")
	if code != ExitOK || !strings.Contains(out, "would defragment 3 etcd members") || !strings.Contains(out, "(leader)") {
		t.Fatalf("etcd defrag --dry-run: exit %d\n%s%s", code, out, errOut)
	}
	c.Host("cp2").StopEtcd()
	code, out, errOut = runCLI(t, opts, "etcd", "defrag")
	if code != ExitRefused || !strings.Contains(errOut, "nothing was changed") || !strings.Contains(errOut, "quorum") {
		t.Fatalf("etcd defrag with cp2 down: exit %d, want %d\n%s%s", code, ExitRefused, out, errOut)
	}
	if err := c.Host("cp2").StartEtcd(ctx); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runCLI(t, opts, "etcd", "defrag")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != ExitOK || len(lines) != 5 || !strings.HasPrefix(lines[0], "defragmenting 3 etcd members") || !strings.HasPrefix(lines[4], "etcd defragmented: 3 members") {
		t.Fatalf("etcd defrag: exit %d\n%s%s", code, out, errOut)
	}
	for _, l := range lines[1:4] {
		if !strings.Contains(l, " -> ") {
			t.Fatalf("etcd defrag: member line %q, want sizes before and after", l)
		}
	}
	var rep ha.EtcdDefrag
	code, out, errOut = runCLI(t, opts, "etcd", "defrag", "-o", "json")
	if code != ExitOK || json.Unmarshal([]byte(out), &rep) != nil || len(rep.Members) != 3 || !rep.Members[2].Leader || !rep.Members[0].Done || rep.Members[0].After == 0 || rep.NoSpace {
		t.Fatalf("etcd defrag -o json: exit %d\n%s%s", code, out, errOut)
	}

	id := n.EtcdMemberStatus(ctx, c.Host("cp3").IP().String()).ID
	if _, err := etcdserverpb.NewMaintenanceClient(cli.ActiveConnection()).Alarm(ctx, &etcdserverpb.AlarmRequest{
		Action: etcdserverpb.AlarmRequest_ACTIVATE, MemberID: id, Alarm: etcdserverpb.AlarmType_NOSPACE,
	}); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runCLI(t, opts, "etcd", "health"); code != ExitFail || !strings.Contains(errOut, "NOSPACE") || !strings.Contains(errOut, "stratum etcd defrag") {
		t.Fatalf("etcd health under NOSPACE: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = runCLI(t, opts, "etcd", "defrag")
	if code != ExitOK || !strings.Contains(out, "compacted to revision") || !strings.Contains(out, "NOSPACE alarm disarmed") {
		t.Fatalf("etcd defrag under NOSPACE: exit %d\n%s%s", code, out, errOut)
	}
	if code, out, errOut := runCLI(t, opts, "etcd", "health"); code != ExitOK {
		t.Fatalf("etcd health after the defrag: exit %d\n%s%s", code, out, errOut)
	}

	// etcd quota: bad sizes are bad usage; a size is set once, then is
	// there already; "default" goes back to etcd's own.
	for _, bad := range []string{"1Mi", "9Gi", "lots", "0"} {
		if code, out, errOut := runCLI(t, opts, "etcd", "quota", bad); code != ExitUsage {
			t.Fatalf("etcd quota %s: exit %d, want %d\n%s%s", bad, code, ExitUsage, out, errOut)
		}
	}
	quota := func(size, want string) {
		t.Helper()
		code, out, errOut := runCLI(t, opts, "etcd", "quota", size)
		if code != ExitOK || !strings.Contains(out, want) {
			t.Fatalf("etcd quota %s: exit %d, want %q\n%s%s", size, code, want, out, errOut)
		}
	}
	quota("80Mi", "this node's etcd quota is 80.0 MiB: recorded")
	quota("80Mi", "is 80.0 MiB already: nothing was changed")
	// Filled to 80% of it: `etcd health` and `status` warn (exit 0 for it).
	// bbolt grows its file in steps of up to 16 MiB (its allocation size),
	// so the quota leaves 16 MiB between 80% of it and itself: a smaller
	// one flaked, the file going from under 80% to the quota in one step.
	value := strings.Repeat("w", 512<<10)
	for i := 0; n.EtcdMemberStatus(ctx, c.Host("cp1").IP().String()).SpaceWarning() == ""; i++ {
		if i == 200 {
			t.Fatal("cp1's database did not reach 80% of its 80 MiB quota after 100 MiB written")
		}
		if _, err := cli.Put(ctx, fmt.Sprintf("/space/%02d", i), value); err != nil {
			t.Fatal(err)
		}
	}
	if code, out, errOut := runCLI(t, opts, "etcd", "health"); code != ExitOK || !strings.Contains(out, "warning: etcd member") || !strings.Contains(out, "of its 80.0 MiB quota") {
		t.Fatalf("etcd health at 80%% of cp1's quota: exit %d\n%s%s", code, out, errOut)
	}
	var st statusReport
	if _, out, errOut := runCLI(t, opts, "status", "-o", "json"); json.Unmarshal([]byte(out), &st) != nil || !strings.Contains(st.EtcdSpace, "of its 80.0 MiB quota") {
		t.Fatalf("status -o json at 80%% of cp1's quota: etcdSpace %q\n%s%s", st.EtcdSpace, out, errOut)
	}
	quota("default", "this node's etcd quota is etcd's default, 2.0 GiB: recorded")
	if q := n.EtcdMemberStatus(ctx, c.Host("cp1").IP().String()).DBQuota; q != 2<<30 {
		t.Fatalf("cp1's quota after `etcd quota default`: %d bytes", q)
	}
}
