package sim

import (
	"context"
	"testing"
	"time"

	"stratum.dev/stratum/internal/assets/assetstest"
)

// BenchmarkCluster3WithAPIServers measures 3 hosts with etcd and apiservers
// up (target: at most 6 s wall on 2 cores), and each apiserver's resident
// memory once ready (target: at most 300 MiB).
func BenchmarkCluster3WithAPIServers(b *testing.B) {
	assetstest.Require(b)
	var simTotal, rawTotal time.Duration
	var simRSS, rawRSS float64
	for i := 0; i < b.N; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		start := time.Now()
		c, err := New(ctx, Config{ControlPlanes: 3, APIServers: true})
		if err != nil {
			b.Fatal(err)
		}
		simTotal += time.Since(start)
		b.StopTimer()
		for _, pid := range SimProcesses(c.RootDir()) {
			simRSS = max(simRSS, ResidentMiB(pid))
		}
		c.Close()
		cancel()
		b.StartTimer()

		start = time.Now()
		base := freeBase(b, 3)
		stopEtcd, etcdURL := rawEtcd3(b, base)
		stopAPI, rss := rawAPIServers(b, base, etcdURL, 3)
		rawTotal += time.Since(start)
		rawRSS = max(rawRSS, rss)
		b.StopTimer()
		stopAPI()
		stopEtcd()
		b.StartTimer()
	}
	b.ReportMetric(simTotal.Seconds()/float64(b.N), "s-sim")
	b.ReportMetric(rawTotal.Seconds()/float64(b.N), "s-raw")
	b.ReportMetric(simTotal.Seconds()/rawTotal.Seconds(), "ratio")
	b.ReportMetric(simRSS, "MiB-apiserver-rss-sim")
	b.ReportMetric(rawRSS, "MiB-apiserver-rss-raw")
}

// BenchmarkMemberCrashRestart measures a member of a 3-member cluster
// crashed and started again from its data, ready (Host.CrashEtcd, then
// Host.StartEtcd), against the same with the crash made as etcd's own
// embed does it (HardStop, then Close to its end), in the same cluster and
// run: the simulator resets the stopped member's connections as a process's
// exit does, so Close does not wait for peer connections to go idle, which a
// connection that served a request just before holds for up to 1 s
// (docs/performance.md).
func BenchmarkMemberCrashRestart(b *testing.B) {
	const memberSettle = 5 * time.Second
	c := Start(b, Config{ControlPlanes: 3, Etcd: FastEtcdTiming})
	h := c.Hosts()[1]
	restart := func(crash func()) time.Duration {
		b.Helper()
		// A member that has run a while: the leader's cluster-version
		// monitor (every 4 s) has asked its peer port for /version.
		b.StopTimer()
		time.Sleep(memberSettle)
		b.StartTimer()
		start := time.Now()
		crash()
		if err := h.StartEtcd(b.Context()); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	var ours, raw time.Duration
	for i := 0; i < b.N; i++ {
		ours += restart(h.CrashEtcd)
		raw += restart(func() {
			m := h.embedded()
			m.stopOnce.Do(func() {
				m.stopping.Store(true)
				m.mendForStop()
				m.e.Server.HardStop()
				m.e.Close()
			})
			h.CrashEtcd() // the simulator's bookkeeping; the member is already closed
		})
	}
	b.ReportMetric(float64(ours.Milliseconds())/float64(b.N), "ours-ms/op")
	b.ReportMetric(float64(raw.Milliseconds())/float64(b.N), "raw-ms/op")
	b.ReportMetric(ours.Seconds()/raw.Seconds(), "ours/raw")
}
