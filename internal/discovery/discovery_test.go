package discovery_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"stratum.dev/stratum/internal/assets/assetstest"
	"stratum.dev/stratum/internal/discovery"
	"stratum.dev/stratum/internal/pki"
	"stratum.dev/stratum/sim"
)

// TestFetchCAPinsTheHash runs against a real kube-apiserver: the joiner's
// anonymous fetch of cluster-info returns the CA only when its hash matches.
func TestFetchCAPinsTheHash(t *testing.T) {
	assetstest.Require(t)
	c := sim.Start(t, sim.Config{ControlPlanes: 1, SpareHosts: 1, APIServers: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ca := c.Shared().Cluster.CertPEM
	hash, err := pki.CAHash(ca)
	if err != nil {
		t.Fatal(err)
	}
	joiner := c.Host("cp2").Handle()
	server := c.Host("cp1").APIServerURL()
	got, serverTime, err := discovery.FetchCA(ctx, server, hash, joiner.DialContext)
	if err != nil {
		t.Fatalf("fetch with the right hash: %v", err)
	}
	if d := time.Since(serverTime); d < -2*time.Second || d > 5*time.Second {
		t.Errorf("the server's time from its Date header is %s, %s from this machine's", serverTime, d)
	}
	if string(got) != string(ca) {
		t.Fatal("fetched CA differs from the cluster's")
	}
	other, err := pki.NewCA("other", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	wrong, _ := pki.CAHash(other.CertPEM)
	if _, _, err := discovery.FetchCA(ctx, server, wrong, joiner.DialContext); !errors.Is(err, pki.ErrCAHashMismatch) {
		t.Fatalf("fetch with another CA's hash = %v, want ErrCAHashMismatch", err)
	}
	if _, _, err := discovery.FetchCA(ctx, server, "sha256:xyz", joiner.DialContext); !errors.Is(err, pki.ErrCAHashMalformed) {
		t.Fatalf("malformed hash = %v", err)
	}
	if _, _, err := discovery.FetchCA(ctx, "http://"+strings.TrimPrefix(server, "https://"), hash, joiner.DialContext); err == nil {
		t.Fatal("a plain-http server was accepted")
	}
	if _, _, err := discovery.FetchCA(ctx, server, hash, joiner.DialContext); errors.Is(err, discovery.ErrUnreachable) {
		t.Fatalf("a server that answered is unreachable: %v", err)
	}
	c.Isolate("cp2")
	if _, _, err := discovery.FetchCA(ctx, server, hash, joiner.DialContext); !errors.Is(err, discovery.ErrUnreachable) {
		t.Fatalf("an isolated joiner's fetch = %v, want ErrUnreachable (a caller may ask again)", err)
	}
	c.Heal()
	if err := c.Host("cp1").KillAPIServer(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := discovery.FetchCA(ctx, server, hash, joiner.DialContext); !errors.Is(err, discovery.ErrUnreachable) {
		t.Fatalf("a fetch from a server that is down = %v, want ErrUnreachable", err)
	}
}
