package ha_test

import (
	"context"
	"net"
	"slices"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"stratum.dev/stratum/internal/assets/assetstest"
	"stratum.dev/stratum/internal/kubeconfig"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/pki"
	"stratum.dev/stratum/internal/version"
	"stratum.dev/stratum/sim"
)

// BenchmarkJoin measures a control-plane join from command start to a voting
// member with its apiserver ready: stratum's join (PrepareControlPlaneJoin
// and StartControlPlane: discovery, download, gates, leaves, kubeconfigs,
// journal, learner add, start, promote, apiserver, kube-vip) against the raw
// sequence (learner add, member start, catch-up, promote, apiserver start),
// with the raw host's files laid out beforehand, untimed. Each side joins
// cp2 into its own fresh one-member cluster, so both pay the same etcd
// costs; which side goes first alternates between iterations. One join in
// a few stalls for seconds in etcd (docs/performance.md), so it reports the
// median of each side, the spread (fastest and slowest), and the ratio of
// the medians; run it with -benchtime 10x or more (make bench does).
func BenchmarkJoin(b *testing.B) {
	assetstest.Require(b)
	var ours, raw []time.Duration
	for i := 0; i < b.N; i++ {
		sides := []string{"ours", "raw"}
		if i%2 == 1 {
			sides[0], sides[1] = sides[1], sides[0]
		}
		for _, side := range sides {
			b.StopTimer()
			c, err := sim.New(context.Background(), sim.Config{ControlPlanes: 1, SpareHosts: 1, APIServers: true, VIP: true})
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			o, err := mintOptions(ctx, c, joinNodeOn(c.Host("cp1")), time.Hour)
			if err != nil {
				b.Fatal(err)
			}
			if side == "raw" {
				layOutRaw(b, c, c.Host("cp2"))
			}
			// etcd refuses membership changes for 5 s after its cluster
			// formed; neither side should pay that.
			time.Sleep(6 * time.Second)
			b.StartTimer()
			start := time.Now()
			if side == "ours" {
				n := joinNodeOn(c.Host("cp2"))
				if _, err := n.PrepareControlPlaneJoin(ctx, o); err != nil {
					b.Fatal(err)
				}
				if _, err := n.StartControlPlane(ctx); err != nil {
					b.Fatal(err)
				}
				ours = append(ours, time.Since(start))
			} else {
				rawJoin(b, ctx, c, c.Host("cp2"))
				raw = append(raw, time.Since(start))
			}
			b.StopTimer()
			cancel()
			c.Close()
		}
	}
	reportSpread(b, "ours", ours)
	reportSpread(b, "raw", raw)
	b.ReportMetric(median(ours).Seconds()/median(raw).Seconds(), "ratio")
}

// reportSpread reports the median, fastest and slowest of samples, in
// seconds, as s-<side>, s-<side>-min and s-<side>-max.
func reportSpread(b *testing.B, side string, samples []time.Duration) {
	sorted := slices.Clone(samples)
	slices.Sort(sorted)
	b.ReportMetric(median(sorted).Seconds(), "s-"+side)
	b.ReportMetric(sorted[0].Seconds(), "s-"+side+"-min")
	b.ReportMetric(sorted[len(sorted)-1].Seconds(), "s-"+side+"-max")
}

// median is the middle of samples (the mean of the two middle ones for an
// even count).
func median(samples []time.Duration) time.Duration {
	s := slices.Clone(samples)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// layOutRaw writes what the raw join needs on h: the shared CAs, its leaves
// and an admin kubeconfig.
func layOutRaw(b testing.TB, c *sim.Cluster, h *sim.Host) {
	files := c.Shared().Files()
	leaves, err := pki.NodeLeaves(c.Shared(), h.Name(), net.IP(h.IP().AsSlice()), &pki.APISANs{IPs: []net.IP{net.IP(c.VIPAddress().AsSlice())}}, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	for k, v := range leaves {
		files[k] = v
	}
	for name, data := range files {
		if err := h.Files().WriteFile(version.PKIFile(name), data, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	kcs, err := kubeconfig.NodeKubeconfigs(c.Shared().Cluster, h.APIServerURL(), time.Now())
	if err != nil {
		b.Fatal(err)
	}
	for name, data := range kcs {
		if err := h.Files().WriteFile(version.Kubeconfig(name), data, 0o600); err != nil {
			b.Fatal(err)
		}
	}
}

// rawJoin is the join without stratum: clientv3 learner add, node state,
// member start, a promote loop, apiserver start.
func rawJoin(b *testing.B, ctx context.Context, c *sim.Cluster, h *sim.Host) {
	cli, err := c.Host("cp1").EtcdClient()
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	resp, err := cli.MemberAddAsLearner(ctx, []string{h.PeerURL()})
	if err != nil {
		b.Fatal(err)
	}
	ic := ""
	for _, m := range resp.Members {
		name := m.Name
		if m.ID == resp.Member.ID {
			name = h.Name()
		}
		for _, u := range m.PeerURLs {
			if ic != "" {
				ic += ","
			}
			ic += name + "=" + u
		}
	}
	if err := nodestate.Save(h.Files(), &nodestate.NodeState{Role: nodestate.RoleControlPlane, NodeName: h.Name(), NodeIP: h.IP().String(),
		Etcd: nodestate.Etcd{Name: h.Name(), PeerURL: h.PeerURL(), ClientURL: h.ClientURL(), InitialCluster: ic, InitialClusterState: "existing"}}); err != nil {
		b.Fatal(err)
	}
	if err := h.StartEtcd(ctx); err != nil {
		b.Fatal(err)
	}
	for {
		_, err := cli.MemberPromote(ctx, resp.Member.ID)
		if err == nil {
			break
		}
		if !rpctypesIsNotReady(err) {
			b.Fatal(err)
		}
		time.Sleep(25 * time.Millisecond)
	}
	if err := h.StartAPIServer(ctx); err != nil {
		b.Fatal(err)
	}
}

func rpctypesIsNotReady(err error) bool {
	e := rpctypes.Error(err)
	return e == rpctypes.ErrMemberLearnerNotReady || e == rpctypes.ErrUnhealthy || e == rpctypes.ErrMemberNotEnoughStarted
}
