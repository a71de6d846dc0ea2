package ha_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/sim"
)

// BenchmarkLearnerAddPromote measures a join's etcd steps -- learner add,
// member started, caught up, promoted -- with this package's code (MemberAdd,
// start, PromoteWhenCaughtUp) against the raw clientv3 calls
// (MemberAddAsLearner, start, a MemberPromote retry loop) in the same run, on
// the same spare host, alternating which goes first. It reports both and
// ours/raw (goal: at most 1.10).
func BenchmarkLearnerAddPromote(b *testing.B) {
	c := sim.Start(b, sim.Config{ControlPlanes: 3, SpareHosts: 1})
	ctx := context.Background()
	ips := ipsOf(c, "cp1", "cp2", "cp3")
	n := nodeOn(c.Host("cp1"))
	spare := c.Host("cp4")
	layOutJoiner(b, c, spare)

	reset := func() {
		spare.StopEtcd()
		if err := n.MemberRemove(ctx, ips, spare.PeerURL()); err != nil {
			b.Fatal(err)
		}
		if err := spare.WipeEtcd(); err != nil {
			b.Fatal(err)
		}
	}
	ours := func() {
		ic, err := n.MemberAdd(ctx, ips, "cp4", spare.PeerURL())
		if err != nil {
			b.Fatal(err)
		}
		startJoiner(b, ctx, spare, ic)
		if err := n.PromoteWhenCaughtUp(ctx, ips, spare.PeerURL()); err != nil {
			b.Fatal(err)
		}
	}
	var eps []string
	for _, ip := range ips {
		eps = append(eps, ha.EtcdEndpoint(ip))
	}
	raw := func() {
		cli, err := c.Host("cp1").EtcdClient(eps...)
		if err != nil {
			b.Fatal(err)
		}
		defer cli.Close()
		resp, err := cli.MemberAddAsLearner(ctx, []string{spare.PeerURL()})
		if err != nil {
			b.Fatal(err)
		}
		var ic []string
		for _, m := range resp.Members {
			name := m.Name
			if m.ID == resp.Member.ID {
				name = "cp4"
			}
			for _, u := range m.PeerURLs {
				ic = append(ic, name+"="+u)
			}
		}
		startJoiner(b, ctx, spare, strings.Join(ic, ","))
		for {
			_, err := cli.MemberPromote(ctx, resp.Member.ID)
			if err == nil {
				return
			}
			if !errors.Is(err, rpctypes.ErrMemberLearnerNotReady) {
				b.Fatalf("raw MemberPromote: %v", err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	// Warm up (and wait out a fresh cluster's strict reconfiguration
	// window) untimed.
	ours()
	reset()

	var tOurs, tRaw time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		steps := []struct {
			f   func()
			sum *time.Duration
		}{{ours, &tOurs}, {raw, &tRaw}}
		if i%2 == 1 {
			steps[0], steps[1] = steps[1], steps[0]
		}
		for _, s := range steps {
			start := time.Now()
			s.f()
			*s.sum += time.Since(start)
			b.StopTimer()
			reset()
			b.StartTimer()
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(tOurs.Milliseconds())/float64(b.N), "ours-ms/op")
	b.ReportMetric(float64(tRaw.Milliseconds())/float64(b.N), "raw-ms/op")
	b.ReportMetric(float64(tOurs)/float64(tRaw), "ours/raw")
}
