package sim

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"stratum.dev/stratum/internal/assets"
	"stratum.dev/stratum/internal/pki"
)

// The raw baselines: the same servers started by hand, without the
// simulator's hosts, PKI, node state or bookkeeping, measured in the same run
// so the benchmark reports the simulator's overhead as a ratio.

// rawEtcd3 starts three plain-HTTP embedded members on the loopback /24 at
// base, launched one after another and waited for together, and returns a
// stop function and the first member's client URL.
func rawEtcd3(b *testing.B, base string) (func(), string) {
	dir := b.TempDir()
	var initial string
	for i := 1; i <= 3; i++ {
		if i > 1 {
			initial += ","
		}
		initial += fmt.Sprintf("m%d=http://%s.%d:2380", i, base, 10+i)
	}
	var members []*embed.Etcd
	for i := 1; i <= 3; i++ {
		cfg := embed.NewConfig()
		cfg.Name = fmt.Sprintf("m%d", i)
		cfg.Dir = filepath.Join(dir, cfg.Name)
		cu, _ := url.Parse(fmt.Sprintf("http://%s.%d:2379", base, 10+i))
		pu, _ := url.Parse(fmt.Sprintf("http://%s.%d:2380", base, 10+i))
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
		cfg.ListenMetricsUrls = nil
		cfg.InitialCluster = initial
		cfg.TickMs, cfg.ElectionMs = uint(DefaultEtcdTiming.HeartbeatMs), uint(DefaultEtcdTiming.ElectionMs)
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
		e, err := embed.StartEtcd(cfg)
		if err != nil {
			b.Fatal(err)
		}
		members = append(members, e)
	}
	for _, e := range members {
		select {
		case <-e.Server.ReadyNotify():
		case <-time.After(time.Minute):
			b.Fatal("raw etcd not ready")
		}
	}
	return func() {
		for _, e := range members {
			e.Server.HardStop()
			e.Close()
		}
	}, fmt.Sprintf("http://%s.11:2379", base)
}

func freeBase(b *testing.B, hosts int) string {
	addr, err := freeSubnet(hosts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { releaseSubnet(addr) })
	a := addr.As4()
	return fmt.Sprintf("%d.%d.%d", a[0], a[1], a[2])
}

// BenchmarkEtcd3Ready measures a fresh 3-member embedded etcd cluster ready,
// through the simulator (mutual TLS, host roots, node state) and raw (plain
// embed.Etcd), and reports the ratio. Target: the simulator's at most 0.5 s.
func BenchmarkEtcd3Ready(b *testing.B) {
	var simTotal, rawTotal time.Duration
	for i := 0; i < b.N; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		start := time.Now()
		c, err := New(ctx, Config{ControlPlanes: 3})
		if err != nil {
			b.Fatal(err)
		}
		simTotal += time.Since(start)
		b.StopTimer()
		c.Close()
		cancel()
		b.StartTimer()

		start = time.Now()
		stop, _ := rawEtcd3(b, freeBase(b, 3))
		rawTotal += time.Since(start)
		b.StopTimer()
		stop()
		b.StartTimer()
	}
	b.ReportMetric(simTotal.Seconds()/float64(b.N), "s-sim")
	b.ReportMetric(rawTotal.Seconds()/float64(b.N), "s-raw")
	b.ReportMetric(simTotal.Seconds()/rawTotal.Seconds(), "ratio")
}

// rawAPIServers starts n kube-apiserver processes by hand against the raw
// etcd at etcdURL, concurrently, each on its own address, and waits for each
// /readyz. It returns a stop function and the largest RSS in MiB.
func rawAPIServers(b *testing.B, base, etcdURL string, n int) (func(), float64) {
	bin, err := assets.KubeAPIServer()
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	shared, err := pki.NewShared(time.Now())
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sa.key"), shared.SAKeyPEM, 0o600); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sa.pub"), shared.SAPubPEM, 0o600); err != nil {
		b.Fatal(err)
	}
	var cmds []*exec.Cmd
	stop := func() {
		for _, cmd := range cmds {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			_ = cmd.Wait()
		}
	}
	var g errgroup.Group
	var addrs []string
	for i := 1; i <= n; i++ {
		ip := fmt.Sprintf("%s.%d", base, 10+i)
		certDir := filepath.Join(dir, "certs"+strconv.Itoa(i))
		cmd := exec.Command(bin,
			"--etcd-servers="+etcdURL, "--bind-address="+ip, "--secure-port=6443",
			"--advertise-address="+ip, "--endpoint-reconciler-type=none", "--cert-dir="+certDir,
			"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
			"--service-account-key-file="+filepath.Join(dir, "sa.pub"),
			"--service-account-signing-key-file="+filepath.Join(dir, "sa.key"),
			"--service-cluster-ip-range=10.96.0.0/12", "--authorization-mode=RBAC",
			"--etcd-prefix=/raw"+strconv.Itoa(i),
		)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			stop()
			b.Fatal(err)
		}
		cmds = append(cmds, cmd)
		addrs = append(addrs, ip)
	}
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	for _, ip := range addrs {
		g.Go(func() error {
			deadline := time.Now().Add(2 * time.Minute)
			for time.Now().Before(deadline) {
				resp, err := client.Get("https://" + ip + ":6443/readyz")
				if err == nil {
					resp.Body.Close()
					if resp.StatusCode == http.StatusOK {
						return nil
					}
				}
				time.Sleep(100 * time.Millisecond)
			}
			return fmt.Errorf("raw apiserver on %s not ready", ip)
		})
	}
	if err := g.Wait(); err != nil {
		stop()
		b.Fatal(err)
	}
	var maxRSS float64
	for _, cmd := range cmds {
		if rss := ResidentMiB(cmd.Process.Pid); rss > maxRSS {
			maxRSS = rss
		}
	}
	return stop, maxRSS
}
