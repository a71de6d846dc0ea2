package sim

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"stratum.dev/stratum/internal/assets/assetstest"
)

// BenchmarkEtcd3Ready measures a fresh 3-member embedded etcd cluster from
// New to every member ready (target: at most 0.5 s on 2 cores).
func BenchmarkEtcd3Ready(b *testing.B) {
	for i := 0; i < b.N; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		start := time.Now()
		c, err := New(ctx, Config{ControlPlanes: 3})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(time.Since(start).Seconds(), "s-ready")
		b.StopTimer()
		c.Close()
		cancel()
		b.StartTimer()
	}
}

// BenchmarkCluster3WithAPIServers measures 3 hosts with etcd and apiservers
// up (target: at most 6 s wall on 2 cores), and each apiserver's resident
// memory once ready (target: at most 300 MiB).
func BenchmarkCluster3WithAPIServers(b *testing.B) {
	assetstest.Require(b)
	for i := 0; i < b.N; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		start := time.Now()
		c, err := New(ctx, Config{ControlPlanes: 3, APIServers: true})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(time.Since(start).Seconds(), "s-ready")
		b.StopTimer()
		var maxRSS float64
		for _, pid := range SimProcesses(c.RootDir()) {
			if rss := rssMiB(pid); rss > maxRSS {
				maxRSS = rss
			}
		}
		b.ReportMetric(maxRSS, "MiB-apiserver-rss")
		c.Close()
		cancel()
		b.StartTimer()
	}
}

func rssMiB(pid int) float64 {
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(status), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}
