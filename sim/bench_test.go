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
