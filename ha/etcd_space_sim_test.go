package ha_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/sim"
)

// TestDefragmentEtcd against three real etcd members whose databases hold
// space compaction freed: refused with a member down (no database touched),
// a dry run changes nothing, and the defragmentation shrinks every member's
// database, the leader's last. Then a NOSPACE alarm (every write refused,
// the apiservers' compactions with them) is cleared by the same command: it
// compacts, defragments and disarms, and writes go through again.
func TestDefragmentEtcd(t *testing.T) {
	t.Parallel() // its own simulated cluster
	c := sim.Start(t, sim.Config{ControlPlanes: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	names := cpNames(3)
	ips := ipsOf(c, names...)
	n := observerOn(c.Host("cp1"))
	var eps []string
	for _, ip := range ips {
		eps = append(eps, ha.EtcdEndpoint(ip))
	}
	cli, err := n.EtcdClient(eps...)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	fragment := func() {
		t.Helper()
		value := strings.Repeat("x", 16<<10)
		for i := range 400 {
			if _, err := cli.Put(ctx, fmt.Sprintf("/defrag/%04d", i), value); err != nil {
				t.Fatal(err)
			}
		}
		resp, err := cli.Delete(ctx, "/defrag/", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
			t.Fatal(err)
		}
	}
	sizes := func() map[string]int64 {
		t.Helper()
		out := map[string]int64{}
		for i, ip := range ips {
			m := n.EtcdMemberStatus(ctx, ip)
			if m.Err != nil {
				continue
			}
			if m.DBQuota != 2<<30 || m.DBSizeInUse > m.DBSize {
				t.Fatalf("%s: database %d bytes, %d in use, quota %d", names[i], m.DBSize, m.DBSizeInUse, m.DBQuota)
			}
			out[names[i]] = m.DBSize
		}
		return out
	}
	fragment()
	fragmented := sizes()
	for name, s := range fragmented {
		if s < 6<<20 {
			t.Fatalf("%s's database is %d bytes after 6 MiB written and deleted; want it still that large", name, s)
		}
	}

	c.Host("cp3").StopEtcd()
	_, err = n.DefragmentEtcd(ctx, ips[:1], false, nil)
	if !errors.Is(err, ha.ErrClusterUnhealthy) || !ha.IsRefusal(err) || !strings.Contains(err.Error(), "nothing was changed") {
		t.Fatalf("defrag with cp3 down: %v; want a refusal for the cluster's health", err)
	}
	if got := sizes(); got["cp1"] != fragmented["cp1"] || got["cp2"] != fragmented["cp2"] {
		t.Fatalf("a refused defrag changed the databases: %v -> %v", fragmented, got)
	}
	if err := c.Host("cp3").StartEtcd(ctx); err != nil {
		t.Fatal(err)
	}
	leader := leaderHost(t, c, names)

	// Measured again: cp3's restart publishes its member's attributes, a
	// write every member applies, which may grow a database by a page.
	beforeDryRun := sizes()
	plan, err := n.DefragmentEtcd(ctx, ips[:1], true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Members) != 3 || plan.Members[2].Name != leader || !plan.Members[2].Leader || plan.NoSpace {
		t.Fatalf("dry run: %+v; want three members, the leader %s last", plan, leader)
	}
	if got := sizes(); got["cp1"] != beforeDryRun["cp1"] || got["cp2"] != beforeDryRun["cp2"] || got["cp3"] != beforeDryRun["cp3"] {
		t.Fatalf("a dry run changed the databases: %v -> %v", beforeDryRun, got)
	}

	var order []string
	rep, err := n.DefragmentEtcd(ctx, ips[:1], false, func(d ha.EtcdMemberDefrag) { order = append(order, d.Name) })
	if err != nil {
		t.Fatal(err)
	}
	if len(order) != 3 || order[2] != leader || rep.CompactRevision != 0 || rep.Disarmed {
		t.Fatalf("defragmented %v (report %+v); want all three, the leader %s last, no compaction", order, rep, leader)
	}
	for name, s := range sizes() {
		if s > fragmented[name]/2 {
			t.Fatalf("%s's database is %d bytes after the defrag, %d before", name, s, fragmented[name])
		}
	}

	// NOSPACE, raised on cp2's member as etcd raises it at its quota.
	id := n.EtcdMemberStatus(ctx, ips[1]).ID
	if _, err := etcdserverpb.NewMaintenanceClient(cli.ActiveConnection()).Alarm(ctx, &etcdserverpb.AlarmRequest{
		Action: etcdserverpb.AlarmRequest_ACTIVATE, MemberID: id, Alarm: etcdserverpb.AlarmType_NOSPACE,
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "/defrag/after", "v"); !errors.Is(err, rpctypes.ErrNoSpace) {
		t.Fatalf("a write under NOSPACE: %v; want etcd's no-space refusal", err)
	}
	if err := n.EtcdClusterHealthy(ctx, ips); err == nil || !strings.Contains(err.Error(), "NOSPACE") || !strings.Contains(err.Error(), "stratum etcd defrag") {
		t.Fatalf("health under NOSPACE: %v; want unhealthy, advising stratum etcd defrag", err)
	}
	rep, err = n.DefragmentEtcd(ctx, ips[:1], false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.NoSpace || !rep.Disarmed || rep.CompactRevision == 0 {
		t.Fatalf("defrag under NOSPACE: %+v; want compacted and disarmed", rep)
	}
	if _, err := cli.Put(ctx, "/defrag/after", "v"); err != nil {
		t.Fatalf("a write after the defrag: %v", err)
	}
	if err := n.EtcdClusterHealthy(ctx, ips); err != nil {
		t.Fatalf("health after the defrag: %v", err)
	}
}

// TestSpaceWarning: a member's database is warned about from 80% of its
// quota, naming the member, its size and what frees it.
func TestSpaceWarning(t *testing.T) {
	m := ha.EtcdMemberHealth{Endpoint: "https://10.0.0.11:2379", ID: 0xabc, DBQuota: 2 << 30, DBSize: 1700 << 20, DBSizeInUse: 300 << 20}
	w := m.SpaceWarning()
	for _, want := range []string{"abc", "10.0.0.11", "1.7 GiB", "83%", "2.0 GiB", "300.0 MiB of it in use", "stratum etcd defrag"} {
		if !strings.Contains(w, want) {
			t.Fatalf("warning %q lacks %q", w, want)
		}
	}
	m.DBSize = 1600 << 20
	if w := m.SpaceWarning(); w != "" {
		t.Fatalf("78%% of the quota warned: %q", w)
	}
	m.DBSize, m.Err = 2<<30, errors.New("down")
	if w := m.SpaceWarning(); w != "" {
		t.Fatalf("a member that did not answer warned: %q", w)
	}
}

// TestSetEtcdQuota against three real etcd members: cp1's quota set to
// 32 MiB (its member restarted onto it, the others left at etcd's default),
// a re-run changes nothing, a member near it is warned about, and writes
// past it raise NOSPACE for the whole cluster. Raising the quota under that
// alarm is allowed, a quota under a database's size is refused, and so is a
// change with a member down; `etcd defrag` then disarms the alarm.
func TestSetEtcdQuota(t *testing.T) {
	t.Parallel() // its own simulated cluster
	c := sim.Start(t, sim.Config{ControlPlanes: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	names := cpNames(3)
	ips := ipsOf(c, names...)
	on := func(name string) *ha.Node { return ha.NewNode(ha.Env{Host: c.Host(name).Handle()}) }
	quotaOf := func(name string) int64 {
		t.Helper()
		m := on("cp1").EtcdMemberStatus(ctx, c.Host(name).IP().String())
		if m.Err != nil {
			t.Fatal(m.Err)
		}
		return m.DBQuota
	}
	const small = 32 << 20
	if changed, restarted, err := on("cp1").SetEtcdQuota(ctx, small); err != nil || !changed || !restarted {
		t.Fatalf("etcd quota 32Mi on cp1: changed %v, restarted %v, %v", changed, restarted, err)
	}
	if q1, q2 := quotaOf("cp1"), quotaOf("cp2"); q1 != small || q2 != 2<<30 {
		t.Fatalf("quotas after setting cp1's: cp1 %d, cp2 %d; want 32 MiB and etcd's default", q1, q2)
	}
	if st, err := nodestate.Load(c.Host("cp1").Handle()); err != nil || st.Etcd.QuotaBackendBytes != small {
		t.Fatalf("cp1's node state after the quota: %+v, %v", st, err)
	}
	if changed, _, err := on("cp1").SetEtcdQuota(ctx, small); err != nil || changed {
		t.Fatalf("the same quota again: changed %v, %v; want nothing changed", changed, err)
	}

	cli, err := on("cp1").EtcdClient(ha.EtcdEndpoint(ips[1]))
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	value := strings.Repeat("q", 512<<10)
	warned := false
	var werr error
	for i := 0; i < 128 && werr == nil; i++ {
		_, werr = cli.Put(ctx, fmt.Sprintf("/quota/%02d", i), value)
		if w := on("cp1").EtcdMemberStatus(ctx, ips[0]).SpaceWarning(); w != "" && !warned {
			warned = true
			if !strings.Contains(w, "of its 32.0 MiB quota") {
				t.Fatalf("cp1's space warning: %q", w)
			}
		}
	}
	if !warned || !errors.Is(werr, rpctypes.ErrNoSpace) {
		t.Fatalf("writes past cp1's 32 MiB quota: warned %v, last write %v; want a warning, then etcd's no-space refusal", warned, werr)
	}
	if err := on("cp1").EtcdClusterHealthy(ctx, ips); err == nil || !strings.Contains(err.Error(), "NOSPACE") {
		t.Fatalf("health past the quota: %v; want NOSPACE", err)
	}

	if _, _, err := on("cp2").SetEtcdQuota(ctx, 16<<20); !ha.IsRefusal(err) || !strings.Contains(fmt.Sprint(err), "etcd would raise NOSPACE at once") {
		t.Fatalf("a 16 MiB quota on cp2, whose database is larger: %v; want a refusal", err)
	}
	c.Host("cp3").StopEtcd()
	if _, _, err := on("cp1").SetEtcdQuota(ctx, 64<<20); !errors.Is(err, ha.ErrClusterUnhealthy) || !ha.IsRefusal(err) {
		t.Fatalf("a quota change with cp3 down: %v; want a refusal for the cluster's health", err)
	}
	if q := quotaOf("cp1"); q != small {
		t.Fatalf("a refused quota change left cp1 at %d bytes", q)
	}
	if err := c.Host("cp3").StartEtcd(ctx); err != nil {
		t.Fatal(err)
	}
	if changed, _, err := on("cp1").SetEtcdQuota(ctx, 64<<20); err != nil || !changed {
		t.Fatalf("etcd quota 64Mi on cp1 under NOSPACE: changed %v, %v", changed, err)
	}
	if _, err := cli.Put(ctx, "/quota/after", "v"); !errors.Is(err, rpctypes.ErrNoSpace) {
		t.Fatalf("a write after the quota was raised, before the alarm is disarmed: %v; want still refused", err)
	}
	rep, err := on("cp1").DefragmentEtcd(ctx, ips[:1], false, nil)
	if err != nil || !rep.Disarmed {
		t.Fatalf("defrag after the quota was raised: %+v, %v; want the alarm disarmed", rep, err)
	}
	if _, err := cli.Put(ctx, "/quota/after", "v"); err != nil {
		t.Fatalf("a write after the defrag: %v", err)
	}

	// With its etcd stopped, cp3's quota is judged against its database
	// file: one it fills to 80% is refused, a larger one is recorded for
	// the next start.
	c.Host("cp3").StopEtcd()
	if _, _, err := on("cp3").SetEtcdQuota(ctx, 32<<20); !ha.IsRefusal(err) || !strings.Contains(fmt.Sprint(err), "etcd would raise NOSPACE") {
		t.Fatalf("a 32 MiB quota on cp3, stopped, whose database file is about that: %v; want a refusal", err)
	}
	if changed, restarted, err := on("cp3").SetEtcdQuota(ctx, 128<<20); err != nil || !changed || restarted {
		t.Fatalf("a 128 MiB quota on cp3, stopped: changed %v, restarted %v, %v; want it recorded, nothing restarted", changed, restarted, err)
	}
	if err := c.Host("cp3").StartEtcd(ctx); err != nil {
		t.Fatal(err)
	}
	if q := quotaOf("cp3"); q != 128<<20 {
		t.Fatalf("cp3 started after its quota was recorded runs with %d bytes; want 128 MiB", q)
	}
}

// TestSetEtcdQuotaWhoseRestartFailedSaysEtcdIsStopped: a quota change
// whose restart of etcd fails (the service manager cannot start it) says
// that etcd may be stopped and that `stratum up` starts it with the new
// quota; run again while etcd is still stopped, it changes nothing and says
// etcd does not run, rather than only "already" over a stopped member.
func TestSetEtcdQuotaWhoseRestartFailedSaysEtcdIsStopped(t *testing.T) {
	t.Parallel() // its own simulated cluster
	c := sim.Start(t, sim.Config{ControlPlanes: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h := c.Host("cp1")
	n, logs := loggedNodeOn(h)
	h.BreakServices(errors.New("injected: the service manager cannot start etcd"))
	changed, _, err := n.SetEtcdQuota(ctx, 64<<20)
	h.MendServices()
	if !changed || err == nil || ha.IsRefusal(err) || !strings.Contains(err.Error(), "etcd may be stopped") || !strings.Contains(err.Error(), "`stratum up` starts it") {
		t.Fatalf("a quota change whose restart failed: changed %v, %v; want a failure saying etcd may be stopped and `stratum up` starts it", changed, err)
	}
	if h.EtcdRunning() {
		t.Fatal("etcd runs after a restart that failed; the test needs it stopped")
	}
	if changed, _, err := n.SetEtcdQuota(ctx, 64<<20); err != nil || changed || !strings.Contains(logs.String(), "etcd does not run on this node: it starts with 64.0 MiB") {
		t.Fatalf("the same quota again with etcd stopped: changed %v, %v; want nothing changed, saying etcd does not run\n%s", changed, err, logs)
	}
}
