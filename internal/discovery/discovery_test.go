package discovery_test

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"math/big"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"stratum.dev/stratum/internal/assets/assetstest"
	"stratum.dev/stratum/internal/discovery"
	"stratum.dev/stratum/internal/kubeconfig"
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

// TestPublishReturnsOnceJoinersMayRead: a joiner that fetches cluster-info
// right after a publication (a script joining as soon as the first node is
// up) is answered: Publish returns once the apiserver's RBAC authorizer has
// the binding that lets anonymous clients read it, which reaches it through
// an informer. Each round takes the binding away first, so every
// publication writes it anew.
func TestPublishReturnsOnceJoinersMayRead(t *testing.T) {
	assetstest.Require(t)
	c := sim.Start(t, sim.Config{ControlPlanes: 1, SpareHosts: 1, APIServers: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin, err := c.Host("cp1").Admin()
	if err != nil {
		t.Fatal(err)
	}
	ca := c.Shared().Cluster.CertPEM
	hash, err := pki.CAHash(ca)
	if err != nil {
		t.Fatal(err)
	}
	server := c.Host("cp1").APIServerURL()
	joiner := c.Host("cp2").Handle()
	for round := range 50 {
		if err := admin.RbacV1().RoleBindings(discovery.Namespace).Delete(ctx, "stratum:cluster-info-reader", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := discovery.Publish(ctx, admin, server, ca); err != nil {
			t.Fatalf("round %d: publish: %v", round, err)
		}
		if _, _, err := discovery.FetchCA(ctx, server, hash, joiner.DialContext); err != nil {
			t.Fatalf("round %d: a joiner's fetch right after the publication: %v", round, err)
		}
	}
}

// TestFetchCATrustsThePinnedCertificateAlone: whoever answers for the server
// (on the VIP's segment, say) knows the cluster CA's certificate, which is
// public. cluster-info carrying it with a certificate of their own appended
// (or put first) matched the pin by its first certificate, and the bootstrap
// kubeconfig made of it trusted both, sending the token to a server the
// other CA signed: FetchCA returns the pinned certificate alone, in either
// order, and a bundle that holds none is refused.
func TestFetchCATrustsThePinnedCertificateAlone(t *testing.T) {
	now := time.Now()
	cluster, err := pki.NewCA("stratum-ca", now)
	if err != nil {
		t.Fatal(err)
	}
	other, err := pki.NewCA("appended", now)
	if err != nil {
		t.Fatal(err)
	}
	hash, err := pki.CAHash(cluster.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	var served []byte
	var credentials atomic.Bool
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			credentials.Store(true)
		}
		if r.URL.Path != "/api/v1/namespaces/"+discovery.Namespace+"/configmaps/"+discovery.ConfigMap {
			http.NotFound(w, r)
			return
		}
		kc, err := kubeconfig.ForCA("https://"+r.Host, served)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		_ = json.NewEncoder(w).Encode(corev1.ConfigMap{Data: map[string]string{discovery.KubeconfigKey: string(kc)}})
	}))
	defer srv.Close()
	ctx := context.Background()

	for _, tc := range []struct {
		name   string
		served []byte
	}{
		{"the CA alone", cluster.CertPEM},
		{"another certificate appended", append(slices.Clone(cluster.CertPEM), other.CertPEM...)},
		{"another certificate first", append(slices.Clone(other.CertPEM), cluster.CertPEM...)},
	} {
		served = tc.served
		got, _, err := discovery.FetchCA(ctx, srv.URL, hash, nil)
		if err != nil || string(got) != string(cluster.CertPEM) {
			t.Fatalf("cluster-info with %s: trusted %d bytes (%v), want the pinned CA's %d alone", tc.name, len(got), err, len(cluster.CertPEM))
		}
	}
	// A renewed certificate of the same key beside the old: the key is what
	// is pinned, so both are trusted, in their order.
	tmpl := *cluster.Cert
	tmpl.SerialNumber = big.NewInt(2)
	der, err := x509.CreateCertificate(rand.Reader, &tmpl, &tmpl, cluster.Key.Public(), cluster.Key)
	if err != nil {
		t.Fatal(err)
	}
	renewed := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	served = slices.Concat(cluster.CertPEM, other.CertPEM, renewed)
	if got, _, err := discovery.FetchCA(ctx, srv.URL, hash, nil); err != nil || string(got) != string(slices.Concat(cluster.CertPEM, renewed)) {
		t.Fatalf("cluster-info with two certificates of the pinned key and another: trusted %d bytes (%v), want the two (%d)", len(got), err, len(cluster.CertPEM)+len(renewed))
	}
	served = other.CertPEM
	if got, _, err := discovery.FetchCA(ctx, srv.URL, hash, nil); !errors.Is(err, pki.ErrCAHashMismatch) || got != nil || !strings.Contains(err.Error(), "nothing was sent to it") {
		t.Fatalf("cluster-info without the pinned CA: %d bytes, %v; want ErrCAHashMismatch, nothing sent", len(got), err)
	}
	if credentials.Load() {
		t.Fatal("FetchCA sent credentials")
	}
}

// TestFetchCARefusedBeforeReady: a refusal of cluster-info (401, 403, 404)
// from a server whose /readyz says it is not ready (an apiserver that just
// started, its authorizer not yet synced: /readyz refused 403 too, or
// answering 500) is ErrUnreachable, to be asked again, and ErrNotPublished
// too, for when the asking stops; from a server that is ready (asked once
// more: it may have become ready since its answer), or that refuses /readyz
// for good (401, 404), it is ErrNotPublished alone. Neither request
// carries credentials.
func TestFetchCARefusedBeforeReady(t *testing.T) {
	var info, readyz, asked atomic.Int32
	var credentials atomic.Bool
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			credentials.Store(true)
		}
		switch r.URL.Path {
		case "/readyz":
			w.WriteHeader(int(readyz.Load()))
		case "/api/v1/namespaces/" + discovery.Namespace + "/configmaps/" + discovery.ConfigMap:
			asked.Add(1)
			w.WriteHeader(int(info.Load()))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	hash, err := pki.CAHash(mustCA(t).CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		info, readyz int
		want         error
	}{
		{http.StatusForbidden, http.StatusForbidden, discovery.ErrUnreachable},
		{http.StatusForbidden, http.StatusInternalServerError, discovery.ErrUnreachable},
		{http.StatusUnauthorized, http.StatusInternalServerError, discovery.ErrUnreachable},
		{http.StatusNotFound, http.StatusServiceUnavailable, discovery.ErrUnreachable},
		{http.StatusForbidden, http.StatusOK, discovery.ErrNotPublished},
		{http.StatusNotFound, http.StatusOK, discovery.ErrNotPublished},
		{http.StatusUnauthorized, http.StatusUnauthorized, discovery.ErrNotPublished},
		{http.StatusForbidden, http.StatusNotFound, discovery.ErrNotPublished},
	} {
		info.Store(int32(tc.info))
		readyz.Store(int32(tc.readyz))
		asked.Store(0)
		_, _, err := discovery.FetchCA(context.Background(), srv.URL, hash, nil)
		if !errors.Is(err, tc.want) || !errors.Is(err, discovery.ErrNotPublished) {
			t.Errorf("cluster-info answered %d, /readyz %d: %v, want %v (and %v)", tc.info, tc.readyz, err, tc.want, discovery.ErrNotPublished)
		}
		switch {
		case tc.want == discovery.ErrUnreachable && err != nil && !strings.Contains(err.Error(), "until it is ready"):
			t.Errorf("cluster-info answered %d, /readyz %d: %q does not say the server is not yet ready", tc.info, tc.readyz, err)
		case tc.want == discovery.ErrNotPublished && errors.Is(err, discovery.ErrUnreachable):
			t.Errorf("cluster-info answered %d, /readyz %d: %v, which the join would ask again for a refusal that stays", tc.info, tc.readyz, err)
		case tc.readyz == http.StatusOK && asked.Load() != 2:
			t.Errorf("cluster-info answered %d, /readyz 200: asked %d times, want twice (once more once ready)", tc.info, asked.Load())
		}
	}
	if credentials.Load() {
		t.Fatal("FetchCA sent credentials")
	}
}

func mustCA(t *testing.T) *pki.CA {
	t.Helper()
	ca, err := pki.NewCA("stratum-ca", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return ca
}
