package ha_test

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/addons"
	"stratum.dev/stratum/internal/assets/assetstest"
	"stratum.dev/stratum/internal/kubeconfig"
	"stratum.dev/stratum/internal/nodelock"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/pki"
	"stratum.dev/stratum/internal/token"
	"stratum.dev/stratum/internal/version"
	"stratum.dev/stratum/sim"
)

// certsEnv is one simulated control plane (cp1) with its ha node, and spare
// hosts to join from.
type certsEnv struct {
	t     *testing.T
	ctx   context.Context
	c     *sim.Cluster
	cp1   *sim.Host
	node  *ha.Node
	admin kubernetes.Interface
	caPEM []byte
}

func startCerts(t *testing.T, cfg sim.Config) *certsEnv {
	t.Helper()
	assetstest.Require(t)
	c := sim.Start(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	cp1 := c.Host("cp1")
	admin, err := cp1.Admin()
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := cp1.Files().ReadFile(version.PKIFile(pki.CACertFile))
	if err != nil {
		t.Fatal(err)
	}
	return &certsEnv{t: t, ctx: ctx, c: c, cp1: cp1, node: certsNodeOn(cp1), admin: admin, caPEM: caPEM}
}

func certsNodeOn(h *sim.Host) *ha.Node {
	hd := h.Handle()
	return ha.NewNode(ha.Env{Host: hd, Checkpoint: hd.Checkpoint})
}

type certsUploadFunc func(ctx context.Context, certKey string, owner *metav1.OwnerReference) error

// mint mints a control-plane grant on cp1 with upload (the node's UploadCerts
// when nil).
func (e *certsEnv) mint(ttl time.Duration, upload certsUploadFunc) (*token.Minted, error) {
	if upload == nil {
		upload = func(ctx context.Context, k string, o *metav1.OwnerReference) error {
			return e.node.UploadCerts(ctx, k, o, nil)
		}
	}
	return token.MintControlPlane(e.ctx, e.admin, token.ControlPlaneOptions{
		Server: e.cp1.APIServerURL(), CACertPEM: e.caPEM, TTL: ttl, Now: e.cp1.Handle().Now,
		NewCertKey: ha.NewCertKey, Upload: upload,
		NarrowReaders: func(ctx context.Context) error { return e.node.NarrowCertsReaderBinding(ctx, e.admin) },
	})
}

func (e *certsEnv) mustMint(ttl time.Duration) *token.Minted {
	e.t.Helper()
	m, err := e.mint(ttl, nil)
	if err != nil {
		e.t.Fatalf("mint: %v", err)
	}
	if !strings.Contains(m.JoinCommand, "--certificate-key "+m.CertKey) || !strings.Contains(m.JoinCommand, "--token "+m.Token) || !strings.HasPrefix(m.CAHash, "sha256:") {
		e.t.Fatalf("join command %q", m.JoinCommand)
	}
	return m
}

// tokenClient is a client on cp1's apiserver authenticating with tok ("" for
// anonymous).
func (e *certsEnv) tokenClient(tok string) kubernetes.Interface {
	e.t.Helper()
	cfg, err := e.cp1.AdminConfig()
	if err != nil {
		e.t.Fatal(err)
	}
	anon := rest.AnonymousClientConfig(cfg)
	anon.BearerToken = tok
	return kubernetes.NewForConfigOrDie(anon)
}

// eventually polls f until it returns nil or the timeout passes.
func certsEventually(t *testing.T, ctx context.Context, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("%s: still %v", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitAuthenticated waits until the apiserver accepts tok.
func (e *certsEnv) waitAuthenticated(tok string) {
	e.t.Helper()
	cs := e.tokenClient(tok)
	certsEventually(e.t, e.ctx, "token "+tok[:6]+" authenticates", func() error {
		_, err := cs.AuthenticationV1().SelfSubjectReviews().Create(e.ctx, &authv1.SelfSubjectReview{}, metav1.CreateOptions{})
		return err
	})
}

// joiner is a spare host with a bootstrap kubeconfig for tok, and its node.
func (e *certsEnv) joiner(name, tok string) (*ha.Node, *sim.Host, string) {
	e.t.Helper()
	h := e.c.Host(name)
	kc, err := kubeconfig.ForToken(e.cp1.APIServerURL(), e.c.Shared().Cluster.CertPEM, tok, "tls-bootstrap-token-user")
	if err != nil {
		e.t.Fatal(err)
	}
	p := version.Kubeconfig("bootstrap")
	if err := h.Files().WriteFile(p, kc, 0o600); err != nil {
		e.t.Fatal(err)
	}
	return certsNodeOn(h), h, p
}

func (e *certsEnv) secret() *corev1.Secret {
	e.t.Helper()
	s, err := e.admin.CoreV1().Secrets("kube-system").Get(e.ctx, ha.CertsSecretName, metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("read %s: %v", ha.CertsSecretName, err)
	}
	return s
}

func certsGrantKeys(s *corev1.Secret) []string {
	var out []string
	for k := range s.Data {
		if strings.HasPrefix(k, "certs-") {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// pkiEmpty fails unless h has no shared file written.
func certsPKIEmpty(t *testing.T, h *sim.Host) {
	t.Helper()
	for _, name := range pki.SharedFileNames() {
		if _, err := h.Files().Stat(version.PKIFile(name)); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s: %s exists after a refused download (stat: %v)", h.Name(), name, err)
		}
	}
}

// sameShared fails unless h's shared files are want's.
func certsSameShared(t *testing.T, h *sim.Host, want map[string][]byte) {
	t.Helper()
	for _, name := range pki.SharedFileNames() {
		got, err := h.Files().ReadFile(version.PKIFile(name))
		if err != nil || !bytes.Equal(got, want[name]) {
			t.Fatalf("%s: %s differs from the cluster's (err %v)", h.Name(), name, err)
		}
		st, _ := h.Files().Stat(version.PKIFile(name))
		if strings.HasSuffix(name, ".key") && st.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %s has mode %v, want 0600", h.Name(), name, st.Mode().Perm())
		}
	}
}

// TestCertsAuthorizationMatrix: only a live control-plane token (and admin)
// reads stratum-certs; the bootstrap group writes nothing but its own hold of
// the fence; a download works exactly for the live grant.
func TestCertsAuthorizationMatrix(t *testing.T) {
	t.Parallel() // its own simulated cluster
	e := startCerts(t, sim.Config{ControlPlanes: 1, SpareHosts: 1, APIServers: true})
	ctx := e.ctx
	live := e.mustMint(time.Hour)
	deleted := e.mustMint(time.Hour)
	worker, err := token.MintWorker(ctx, e.admin, token.WorkerOptions{Server: e.cp1.APIServerURL(), CACertPEM: e.caPEM})
	if err != nil {
		t.Fatal(err)
	}
	expired, err := sim.CreateBootstrapToken(ctx, e.admin, []string{token.ControlPlaneGroup}, time.Now().Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	e.waitAuthenticated(live.Token)
	e.waitAuthenticated(worker.Token)
	if err := e.admin.CoreV1().Secrets("kube-system").Delete(ctx, token.SecretPrefix+deleted.ID, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	liveCS := e.tokenClient(live.Token)
	getCerts := func(cs kubernetes.Interface) error {
		_, err := cs.CoreV1().Secrets("kube-system").Get(ctx, ha.CertsSecretName, metav1.GetOptions{})
		return err
	}
	certsEventually(t, ctx, "live control-plane token reads stratum-certs", func() error { return getCerts(liveCS) })
	certsEventually(t, ctx, "deleted token refused", func() error {
		if err := getCerts(e.tokenClient(deleted.Token)); !apierrors.IsUnauthorized(err) {
			return errors.New("not yet Unauthorized")
		}
		return nil
	})
	for _, tc := range []struct {
		who  string
		cs   kubernetes.Interface
		want func(error) bool
	}{
		{"admin", e.admin, func(err error) bool { return err == nil }},
		{"live control-plane token", liveCS, func(err error) bool { return err == nil }},
		{"expired control-plane token", e.tokenClient(expired), apierrors.IsUnauthorized},
		{"deleted control-plane token", e.tokenClient(deleted.Token), apierrors.IsUnauthorized},
		{"worker token", e.tokenClient(worker.Token), apierrors.IsForbidden},
		{"anonymous", e.tokenClient(""), func(err error) bool { return apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) }},
	} {
		if err := getCerts(tc.cs); !tc.want(err) {
			t.Errorf("%s reading stratum-certs: %v", tc.who, err)
		}
	}

	// Writes the bootstrap group may not make (RBAC refuses them first).
	leases := liveCS.CoordinationV1().Leases("kube-system")
	if _, err := e.admin.CoordinationV1().Leases("kube-system").Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "other-lease"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	other, err := leases.Get(ctx, "other-lease", metav1.GetOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("live token reading another Lease: %v, want Forbidden", err)
	}
	other = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "other-lease", Namespace: "kube-system"}}
	if _, err := leases.Update(ctx, other, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("live token updating another Lease: %v, want Forbidden", err)
	}
	if _, err := liveCS.CoreV1().Secrets("kube-system").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "planted"}}, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("live token creating a Secret: %v, want Forbidden", err)
	}
	s := e.secret()
	s.Data["certs"] = []byte("x")
	if _, err := liveCS.CoreV1().Secrets("kube-system").Update(ctx, s, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("live token updating stratum-certs: %v, want Forbidden", err)
	}
	// Admission refuses other writes even where RBAC would allow them: the
	// group impersonated together with system:masters.
	acfg, _ := e.cp1.AdminConfig()
	acfg.Impersonate = rest.ImpersonationConfig{UserName: "system:bootstrap:zzzzzz", Groups: []string{token.ControlPlaneGroup, "system:masters", "system:authenticated"}}
	masterish := kubernetes.NewForConfigOrDie(acfg)
	if _, err := masterish.CoreV1().Secrets("kube-system").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "planted"}}, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), ha.JoinFencePolicy) {
		t.Errorf("bootstrap group (with RBAC) creating a Secret: %v, want the %s policy's denial", err, ha.JoinFencePolicy)
	}
	otherLease, err := e.admin.CoordinationV1().Leases("kube-system").Get(ctx, "other-lease", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := masterish.CoordinationV1().Leases("kube-system").Update(ctx, otherLease, metav1.UpdateOptions{}); err == nil || !strings.Contains(err.Error(), ha.JoinFencePolicy) {
		t.Errorf("bootstrap group (with RBAC) updating another Lease: %v, want the policy's denial", err)
	}

	// The fence: held by another, the token cannot take it; it may set only
	// itself; released, it takes it.
	fence, err := e.node.TakeFence(ctx, e.admin, "rekey@cp1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	me := "system:bootstrap:" + live.ID
	setHolder := func(holder string, secs int32) error {
		l, err := leases.Get(ctx, ha.FenceLeaseName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.NewMicroTime(time.Now())
		l.Spec.HolderIdentity, l.Spec.RenewTime, l.Spec.AcquireTime, l.Spec.LeaseDurationSeconds = &holder, &now, &now, &secs
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		return err
	}
	if err := setHolder(me, 60); err == nil || !strings.Contains(err.Error(), "held by another") {
		t.Errorf("live token taking the held fence: %v, want admission's denial", err)
	}
	if err := fence.Confirm(ctx); err != nil {
		t.Errorf("the holder lost the fence to a refused take: %v", err)
	}
	if err := fence.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := setHolder("rekey@cp1", 60); err == nil || !strings.Contains(err.Error(), "only itself") {
		t.Errorf("live token naming another holder: %v, want admission's denial", err)
	}
	if err := setHolder(me, 100000); err == nil || !strings.Contains(err.Error(), ha.JoinFencePolicy) {
		t.Errorf("live token holding the fence for 100000s: %v, want admission's denial", err)
	}
	if err := setHolder(me, 60); err != nil {
		t.Errorf("live token taking the free fence: %v", err)
	}
	if _, err := e.node.TakeFence(ctx, e.admin, "rekey@cp1", time.Minute); !errors.Is(err, ha.ErrFenceHeld) {
		t.Errorf("admin fence over the token's hold: %v, want ErrFenceHeld", err)
	}

	// Downloads on the spare host: every refused one writes nothing.
	for _, tc := range []struct {
		who, tok, key string
		want          error
	}{
		{"worker token", worker.Token, live.CertKey, ha.ErrTokenRefused},
		{"expired token", expired, live.CertKey, ha.ErrTokenRefused},
		{"deleted token", deleted.Token, deleted.CertKey, ha.ErrTokenRefused},
		{"malformed key", live.Token, live.CertKey[:63], ha.ErrBadCertKey},
		{"another grant's key", live.Token, deleted.CertKey, ha.ErrBundleOpen},
	} {
		j, h, kc := e.joiner("cp2", tc.tok)
		if _, err := j.DownloadCerts(ctx, kc, tc.key, nil); !errors.Is(err, tc.want) {
			t.Errorf("download with %s: %v, want %v", tc.who, err, tc.want)
		}
		certsPKIEmpty(t, h)
	}
	j, h, kc := e.joiner("cp2", live.Token)
	refuse := errors.New("pod CIDR differs")
	if _, err := j.DownloadCerts(ctx, kc, live.CertKey, func(p ha.BundleProfile) error {
		if p.PodCIDR != e.c.Config().PodCIDR {
			t.Errorf("profile pod CIDR %q", p.PodCIDR)
		}
		return refuse
	}); !errors.Is(err, refuse) {
		t.Errorf("download refused by check: %v", err)
	}
	certsPKIEmpty(t, h)
	g, err := j.DownloadCerts(ctx, kc, live.CertKey, func(p ha.BundleProfile) error { return nil })
	if err != nil {
		t.Fatalf("live grant download: %v", err)
	}
	if g.Legacy || g.Generation < 1 || len(g.EtcdEndpoints) != 1 || g.EtcdEndpoints[0] != e.cp1.ClientURL() || g.CarriesAtRestKey {
		t.Errorf("grant %+v", g)
	}
	certsSameShared(t, h, e.c.Shared().Files())

	// The download dials through the joiner's host: cut off, it fails.
	certsPKIEmptyAfter := func() {
		for _, name := range pki.SharedFileNames() {
			_ = h.Files().Remove(version.PKIFile(name))
		}
	}
	certsPKIEmptyAfter()
	e.c.Isolate("cp2")
	if _, err := j.DownloadCerts(ctx, kc, live.CertKey, nil); !errors.Is(err, sim.ErrIsolated) {
		t.Errorf("download from an isolated joiner: %v, want the simulated partition's refusal", err)
	}
	certsPKIEmpty(t, h)
	e.c.Heal()

	// A grant a newer stratum minted (its entry in an envelope version this
	// stratum does not read, as a rolling upgrade meets it): refused,
	// nothing written, naming the newer stratum rather than the key.
	sec, err := e.admin.CoreV1().Secrets("kube-system").Get(ctx, ha.CertsSecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	entry := "certs-" + live.ID
	if len(sec.Data[entry]) == 0 {
		t.Fatalf("no entry %s in %s", entry, ha.CertsSecretName)
	}
	sec.Data[entry][0]++
	if _, err := e.admin.CoreV1().Secrets("kube-system").Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := j.DownloadCerts(ctx, kc, live.CertKey, nil); !errors.Is(err, ha.ErrBundleMalformed) || !strings.Contains(err.Error(), "minted by a newer stratum") || strings.Contains(err.Error(), "check the --certificate-key") {
		t.Errorf("download of a newer stratum's grant: %v, want ErrBundleMalformed naming a newer stratum, not the key", err)
	}
	certsPKIEmpty(t, h)

	// No bundle published: the error says how to mint one.
	if err := e.admin.CoreV1().Secrets("kube-system").Delete(ctx, ha.CertsSecretName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := j.DownloadCerts(ctx, kc, live.CertKey, nil); !errors.Is(err, ha.ErrNoBundle) || !strings.Contains(err.Error(), "stratum token create --control-plane") {
		t.Errorf("download with nothing published: %v", err)
	}
}

// TestCertsTwoMintsAndBudget: each join decrypts its own grant after a later
// mint moved the legacy entry; an entry swapped into another grant's place
// does not open; a mint the Secret cannot hold is refused unwritten.
func TestCertsTwoMintsAndBudget(t *testing.T) {
	t.Parallel() // its own simulated cluster
	e := startCerts(t, sim.Config{ControlPlanes: 1, SpareHosts: 2, APIServers: true})
	ctx := e.ctx
	st, err := nodestate.Load(e.cp1.Files())
	if err != nil {
		t.Fatal(err)
	}
	cilium := addons.CiliumSettings{Enabled: true, KubeProxyReplacement: true, Version: "1.18.2"}
	st.Cilium = cilium
	if err := nodestate.Save(e.cp1.Files(), st); err != nil {
		t.Fatal(err)
	}
	a := e.mustMint(time.Hour)
	b := e.mustMint(time.Hour)
	s := e.secret()
	if got := certsGrantKeys(s); !slices.Equal(got, []string{ha.GrantEntry(a.ID), ha.GrantEntry(b.ID)}) && !slices.Equal(got, []string{ha.GrantEntry(b.ID), ha.GrantEntry(a.ID)}) {
		t.Fatalf("grant entries %v", got)
	}
	if len(s.OwnerReferences) != 2 || s.Annotations["stratum.dev/certs-key-set-at"] == "" {
		t.Fatalf("owners %v annotations %v", s.OwnerReferences, s.Annotations)
	}
	e.waitAuthenticated(a.Token)
	e.waitAuthenticated(b.Token)

	// A swapped entry: B's place holding A's ciphertext does not open with
	// A's key, and nothing is written.
	swapped := s.DeepCopy()
	swapped.Data[ha.GrantEntry(b.ID)] = s.Data[ha.GrantEntry(a.ID)]
	if _, err := e.admin.CoreV1().Secrets("kube-system").Update(ctx, swapped, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	jb, hb, kcb := e.joiner("cp3", b.Token)
	if _, err := jb.DownloadCerts(ctx, kcb, a.CertKey, nil); !errors.Is(err, ha.ErrBundleOpen) {
		t.Fatalf("swapped entry opened: %v", err)
	}
	certsPKIEmpty(t, hb)
	restored := e.secret()
	restored.Data[ha.GrantEntry(b.ID)] = s.Data[ha.GrantEntry(b.ID)]
	if _, err := e.admin.CoreV1().Secrets("kube-system").Update(ctx, restored, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	ja, ha2, kca := e.joiner("cp2", a.Token)
	var seen ha.BundleProfile
	ga, err := ja.DownloadCerts(ctx, kca, a.CertKey, func(p ha.BundleProfile) error { seen = p; return nil })
	if err != nil {
		t.Fatalf("first grant after a second mint: %v", err)
	}
	cfg := e.c.Config()
	if !seen.Cilium.Equal(cilium) || seen.PodCIDR != cfg.PodCIDR || seen.ServiceCIDR != cfg.ServiceCIDR || seen.ClusterDomain != cfg.ClusterDomain || ga.Legacy {
		t.Fatalf("profile the check saw: %+v (grant %+v)", seen, ga)
	}
	certsSameShared(t, ha2, e.c.Shared().Files())
	if _, err := jb.DownloadCerts(ctx, kcb, b.CertKey, nil); err != nil {
		t.Fatalf("second grant: %v", err)
	}
	certsSameShared(t, hb, e.c.Shared().Files())

	// The budget: room for what is there and not one more grant.
	before := e.secret()
	budget := ha.DataSize(before.Data) + 100
	t.Logf("two grants take %d bytes; one grant entry is %d bytes; production budget %d bytes", ha.DataSize(before.Data), len(before.Data[ha.GrantEntry(a.ID)]), ha.GrantSecretBudget)
	_, err = e.mint(time.Hour, func(ctx context.Context, k string, o *metav1.OwnerReference) error {
		return e.node.UploadCertsWithBudget(ctx, k, o, nil, budget)
	})
	if !errors.Is(err, ha.ErrOverBudget) || !ha.IsRefusal(err) {
		t.Fatalf("third mint over budget: %v, want a refusal naming ErrOverBudget", err)
	}
	after := e.secret()
	if after.ResourceVersion != before.ResourceVersion {
		t.Fatalf("refused mint wrote the Secret (resourceVersion %s -> %s)", before.ResourceVersion, after.ResourceVersion)
	}
	toks, err := e.admin.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{FieldSelector: "type=" + string(corev1.SecretTypeBootstrapToken)})
	if err != nil {
		t.Fatal(err)
	}
	if len(toks.Items) != 2 {
		t.Fatalf("%d bootstrap tokens after a refused mint, want the 2 granted", len(toks.Items))
	}
}

// TestCertsRekeyAndReUpload: a rekey retires every earlier key; a rekey whose
// fence was lost writes nothing; a re-upload after a CA change retires
// pending grants before anything is written, and a fresh mint carries the new CA.
func TestCertsRekeyAndReUpload(t *testing.T) {
	t.Parallel() // its own simulated cluster
	e := startCerts(t, sim.Config{ControlPlanes: 1, SpareHosts: 1, APIServers: true})
	ctx := e.ctx
	a := e.mustMint(time.Hour)
	b := e.mustMint(time.Hour)
	e.waitAuthenticated(a.Token)
	e.waitAuthenticated(b.Token)

	if err := e.node.RekeySharedCerts(ctx, a.CertKey, nil); err == nil {
		t.Fatal("rekey without a fence recheck was not refused")
	}
	fence, err := e.node.TakeFence(ctx, e.admin, "rekey@cp1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	k, _ := ha.NewCertKey()
	if err := e.node.RekeySharedCerts(ctx, k, fence.Confirm); err != nil {
		t.Fatalf("rekey: %v", err)
	}
	if got := certsGrantKeys(e.secret()); len(got) != 0 {
		t.Fatalf("grant entries after rekey: %v", got)
	}
	for _, m := range []*token.Minted{a, b} {
		j, h, kc := e.joiner("cp2", m.Token)
		if _, err := j.DownloadCerts(ctx, kc, m.CertKey, nil); !errors.Is(err, ha.ErrBundleOpen) {
			t.Fatalf("pre-rekey key of %s: %v, want ErrBundleOpen", m.ID, err)
		}
		certsPKIEmpty(t, h)
	}
	if err := e.node.DownloadCertsAdmin(ctx, a.CertKey); !errors.Is(err, ha.ErrBundleOpen) {
		t.Fatalf("admin download with a pre-rekey key: %v", err)
	}
	// Under the node's maintenance lock: refused while another operation
	// (a renewal) holds it.
	renewing, err := nodelock.Acquire(e.cp1.Handle(), nodelock.Maintenance, "stratum certs renew")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.node.DownloadCertsAdmin(ctx, k); !errors.Is(err, nodelock.ErrBusy) || !strings.Contains(err.Error(), "stratum certs renew") {
		t.Fatalf("admin download while a renewal holds the node: %v, want ErrBusy naming it", err)
	}
	if err := renewing(); err != nil {
		t.Fatal(err)
	}
	if err := e.node.DownloadCertsAdmin(ctx, k); err != nil {
		t.Fatalf("admin download with the new key: %v", err)
	}
	certsSameShared(t, e.cp1, e.c.Shared().Files())

	// A lost fence refuses the publication and writes nothing.
	rv := e.secret().ResourceVersion
	e.cp1.SetClockOffset(2 * time.Minute)
	k2, _ := ha.NewCertKey()
	if err := e.node.RekeySharedCerts(ctx, k2, fence.Confirm); !errors.Is(err, ha.ErrFenceLost) {
		t.Fatalf("rekey under a run-out fence: %v, want ErrFenceLost", err)
	}
	if got := e.secret().ResourceVersion; got != rv {
		t.Fatalf("refused rekey wrote the Secret (%s -> %s)", rv, got)
	}
	e.cp1.SetClockOffset(0)
	// The rekeys are done: free the fence, as the operation would, for the
	// re-upload, which takes it itself (a lease that ran out is free already).
	if err := fence.Release(ctx); err != nil && !errors.Is(err, ha.ErrFenceLost) {
		t.Fatal(err)
	}

	// A CA change, then the re-upload.
	c := e.mustMint(time.Hour)
	e.waitAuthenticated(c.Token)
	rotated, err := pki.NewShared(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	want := e.c.Shared().Files()
	// Mid-rotation: the new cluster CA signs, the old one is still trusted
	// (clients hold certificates it signed), so ca.crt is the trust bundle.
	// The etcd CA is left alone: this node's etcd client still needs it.
	newFiles := rotated.Files()
	newFiles[pki.CACertFile] = append(append([]byte{}, rotated.Cluster.CertPEM...), e.c.Shared().Cluster.CertPEM...)
	for name, data := range newFiles {
		if strings.HasPrefix(name, "etcd/") {
			continue
		}
		want[name] = data
		if err := e.cp1.Files().WriteFile(version.PKIFile(name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	k3, _ := ha.NewCertKey()
	if err := e.node.ReUploadCerts(ctx, k3); err != nil {
		t.Fatalf("re-upload: %v", err)
	}
	after := e.secret()
	if got := certsGrantKeys(after); len(got) != 0 || len(after.OwnerReferences) != 3 {
		t.Fatalf("after re-upload: grants %v, owners %v (want none and the 3 kept)", got, after.OwnerReferences)
	}
	j, h, kc := e.joiner("cp2", c.Token)
	if _, err := j.DownloadCerts(ctx, kc, c.CertKey, nil); !errors.Is(err, ha.ErrBundleOpen) {
		t.Fatalf("pending grant after the re-upload: %v, want ErrBundleOpen", err)
	}
	certsPKIEmpty(t, h)
	d := e.mustMint(time.Hour)
	e.waitAuthenticated(d.Token)
	j, h, kc = e.joiner("cp2", d.Token)
	if _, err := j.DownloadCerts(ctx, kc, d.CertKey, nil); err != nil {
		t.Fatalf("fresh grant after the re-upload: %v", err)
	}
	certsSameShared(t, h, want)
}

// certsRacingSecrets runs before once ahead of the first Secret update: a write
// landing between the prune's read and its write.
type certsRacingCS struct {
	kubernetes.Interface
	before func()
}

func (r certsRacingCS) CoreV1() corev1client.CoreV1Interface {
	return certsRacingCore{r.Interface.CoreV1(), r.before}
}

type certsRacingCore struct {
	corev1client.CoreV1Interface
	before func()
}

func (r certsRacingCore) Secrets(ns string) corev1client.SecretInterface {
	return certsRacingSecrets{r.CoreV1Interface.Secrets(ns), r.before}
}

type certsRacingSecrets struct {
	corev1client.SecretInterface
	before func()
}

func (r certsRacingSecrets) Update(ctx context.Context, s *corev1.Secret, o metav1.UpdateOptions) (*corev1.Secret, error) {
	r.before()
	return r.SecretInterface.Update(ctx, s, o)
}

// TestPruneExpiredGrants: prune removes exactly the grants whose token is
// gone or expired by stratum's clock, writes nothing when none is, and
// retries a conflict from fresh state.
func TestPruneExpiredGrants(t *testing.T) {
	t.Parallel() // its own simulated cluster
	e := startCerts(t, sim.Config{ControlPlanes: 1, APIServers: true})
	ctx := e.ctx
	long := e.mustMint(2 * time.Hour)
	short := e.mustMint(time.Hour)
	gone := e.mustMint(2 * time.Hour)
	if err := e.admin.CoreV1().Secrets("kube-system").Delete(ctx, token.SecretPrefix+gone.ID, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	legacy := e.secret().Data[ha.LegacyEntry]
	if err := e.node.PruneExpiredGrants(ctx, e.admin); err != nil {
		t.Fatal(err)
	}
	s := e.secret()
	if got := certsGrantKeys(s); !slices.Equal(got, certsSorted(ha.GrantEntry(long.ID), ha.GrantEntry(short.ID))) {
		t.Fatalf("after pruning the deleted token's grant: %v", got)
	}
	if len(s.OwnerReferences) != 3 || !bytes.Equal(s.Data[ha.LegacyEntry], legacy) {
		t.Fatalf("prune changed owners (%d) or the legacy entry", len(s.OwnerReferences))
	}
	if err := e.node.PruneExpiredGrants(ctx, e.admin); err != nil {
		t.Fatal(err)
	}
	if got := e.secret().ResourceVersion; got != s.ResourceVersion {
		t.Fatalf("prune with nothing expired wrote (%s -> %s)", s.ResourceVersion, got)
	}

	// 90 minutes on by stratum's clock: the 1 h token has expired, the 2 h
	// one has not. A write lands between the prune's read and its write.
	e.cp1.SetClockOffset(90 * time.Minute)
	var once sync.Once
	raced := false
	racer := certsRacingCS{e.admin, func() {
		once.Do(func() {
			cur := e.secret()
			cur.Annotations["test/raced"] = "yes"
			if _, err := e.admin.CoreV1().Secrets("kube-system").Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
				t.Errorf("racing write: %v", err)
			}
			raced = true
		})
	}}
	if err := e.node.PruneExpiredGrants(ctx, racer); err != nil {
		t.Fatalf("prune over a racing write: %v", err)
	}
	s = e.secret()
	if !raced || s.Annotations["test/raced"] != "yes" {
		t.Fatal("the racing write did not land or was overwritten")
	}
	if got := certsGrantKeys(s); !slices.Equal(got, []string{ha.GrantEntry(long.ID)}) {
		t.Fatalf("after expiry by stratum's clock: %v", got)
	}
	if err := e.node.PruneExpiredGrants(ctx, e.admin); err != nil {
		t.Fatal(err)
	}
	if got := e.secret().ResourceVersion; got != s.ResourceVersion {
		t.Fatalf("second prune wrote (%s -> %s)", s.ResourceVersion, got)
	}

	// A mint drops the grants whose token is gone in the same update that
	// appends its own, and merges its owner with the ones there.
	if err := e.admin.CoreV1().Secrets("kube-system").Delete(ctx, token.SecretPrefix+long.ID, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	fresh := e.mustMint(time.Hour)
	s = e.secret()
	if got := certsGrantKeys(s); !slices.Equal(got, []string{ha.GrantEntry(fresh.ID)}) {
		t.Fatalf("after a mint with the other grant's token gone: %v", got)
	}
	if len(s.OwnerReferences) != 4 {
		t.Fatalf("a mint replaced owners instead of merging: %v", s.OwnerReferences)
	}
}

func certsSorted(s ...string) []string { slices.Sort(s); return s }

// TestCertsGarbageCollectedWithLastToken: with kube-controller-manager's
// garbage collector, stratum-certs outlives the first owning token and goes
// with the last.
func TestCertsGarbageCollectedWithLastToken(t *testing.T) {
	t.Parallel() // its own simulated cluster
	e := startCerts(t, sim.Config{ControlPlanes: 1, APIServers: true, ControllerManager: true})
	ctx := e.ctx
	a := e.mustMint(time.Hour)
	b := e.mustMint(time.Hour)
	if n := len(e.secret().OwnerReferences); n != 2 {
		t.Fatalf("%d owners, want 2", n)
	}
	// A sentinel owned by a's token alone shows when the collector has acted
	// on that token's deletion.
	sentinel, err := e.admin.CoreV1().ConfigMaps("kube-system").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Name: "gc-sentinel", OwnerReferences: []metav1.OwnerReference{a.Owner}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.admin.CoreV1().Secrets("kube-system").Delete(ctx, token.SecretPrefix+a.ID, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	certsWaitGone(t, ctx, func() error {
		_, err := e.admin.CoreV1().ConfigMaps("kube-system").Get(ctx, sentinel.Name, metav1.GetOptions{})
		return err
	}, "the sentinel owned by the first token")
	// The collector, having acted on stratum-certs itself, drops the dangling
	// reference and keeps the Secret (a deletion would be NotFound here).
	certsEventually(t, ctx, "stratum-certs kept with only its live owner", func() error {
		s, err := e.admin.CoreV1().Secrets("kube-system").Get(ctx, ha.CertsSecretName, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("stratum-certs after its first owner went: %v", err)
		}
		if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].UID != b.Owner.UID {
			return errors.New("owners not yet narrowed to the live token")
		}
		return nil
	})
	if err := e.admin.CoreV1().Secrets("kube-system").Delete(ctx, token.SecretPrefix+b.ID, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	certsWaitGone(t, ctx, func() error {
		_, err := e.admin.CoreV1().Secrets("kube-system").Get(ctx, ha.CertsSecretName, metav1.GetOptions{})
		return err
	}, "stratum-certs once its last owner is gone")
}

func certsWaitGone(t *testing.T, ctx context.Context, get func() error, what string) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		err := get()
		if apierrors.IsNotFound(err) {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("%s was not garbage-collected (last: %v)", what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestCertsAtRestKeyProofAndKeySetAt: a bundle uploaded from a node with an
// at-rest encryption config carries it (written 0600 on the joiner), its proof
// opens only under the same config, and the key-set-at stamp moves with a
// re-key.
func TestCertsAtRestKeyProofAndKeySetAt(t *testing.T) {
	t.Parallel() // its own simulated cluster
	e := startCerts(t, sim.Config{ControlPlanes: 1, SpareHosts: 1, APIServers: true})
	ctx := e.ctx
	if _, present, err := e.node.SharedCertsKeySetAt(ctx); err != nil || present {
		t.Fatalf("key-set-at before any upload: present=%t err=%v", present, err)
	}
	if pub, _, err := e.node.PublishedBundleCarriesKey(ctx, e.admin, nil); err != nil || pub {
		t.Fatalf("published before any upload: %t %v", pub, err)
	}
	enc := []byte("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\n# secret: one\n")
	if err := e.cp1.Files().WriteFile("/etc/stratum/encryption-config.yaml", enc, 0o600); err != nil {
		t.Fatal(err)
	}
	m := e.mustMint(time.Hour)
	setAt, present, err := e.node.SharedCertsKeySetAt(ctx)
	if err != nil || !present || time.Since(setAt) > time.Minute {
		t.Fatalf("key-set-at after a mint: %v %t %v", setAt, present, err)
	}
	for _, tc := range []struct {
		name         string
		cfg          []byte
		pub, carries bool
	}{
		{"same config", enc, true, true},
		{"another config", []byte("kind: EncryptionConfiguration\n# secret: two\n"), true, false},
		{"no config yet", nil, true, false},
	} {
		pub, carries, err := e.node.PublishedBundleCarriesKey(ctx, e.admin, tc.cfg)
		if err != nil || pub != tc.pub || carries != tc.carries {
			t.Errorf("%s: published=%t carries=%t err=%v, want %t %t", tc.name, pub, carries, err, tc.pub, tc.carries)
		}
	}
	e.waitAuthenticated(m.Token)
	j, h, kc := e.joiner("cp2", m.Token)
	g, err := j.DownloadCerts(ctx, kc, m.CertKey, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !g.CarriesAtRestKey {
		t.Errorf("grant %+v does not say it carried the at-rest key", g)
	}
	got, err := h.Files().ReadFile("/etc/stratum/encryption-config.yaml")
	st, _ := h.Files().Stat("/etc/stratum/encryption-config.yaml")
	if err != nil || !bytes.Equal(got, enc) || st.Mode().Perm() != 0o600 {
		t.Errorf("joiner's encryption config: %v, mode %v", err, st)
	}

	// A keyless re-upload drops the proof: the published bundle no longer
	// carries the key.
	if err := e.cp1.Files().Remove("/etc/stratum/encryption-config.yaml"); err != nil {
		t.Fatal(err)
	}
	e.cp1.SetClockOffset(time.Hour)
	k, _ := ha.NewCertKey()
	if err := e.node.ReUploadCerts(ctx, k); err != nil {
		t.Fatal(err)
	}
	if _, carries, err := e.node.PublishedBundleCarriesKey(ctx, e.admin, enc); err != nil || carries {
		t.Errorf("keyless re-upload still carries the key: %t %v", carries, err)
	}
	later, _, err := e.node.SharedCertsKeySetAt(ctx)
	if err != nil || !later.After(setAt.Add(30*time.Minute)) {
		t.Errorf("key-set-at after a re-key by a clock an hour on: %v (was %v), %v", later, setAt, err)
	}

	// cp2 still holds the key its download wrote (as a join that failed
	// after it would leave it). Its download of the keyless bundle takes
	// it away: its apiserver would otherwise encrypt Secrets with a key no
	// other apiserver holds.
	m2 := e.mustMint(time.Hour)
	e.waitAuthenticated(m2.Token)
	j2, h2, kc2 := e.joiner("cp2", m2.Token)
	// Two joins refused after their download (the maintenance fence held
	// by another operation, met in the preflight) each leave that key as
	// they found it: the download removed it, and the refusal's undo puts
	// it back, with every other file.
	hash, err := pki.CAHash(e.caPEM)
	if err != nil {
		t.Fatal(err)
	}
	o := ha.JoinOptions{Server: e.cp1.APIServerURL(), Token: m2.Token, CAHash: hash, CertKey: m2.CertKey}
	// Held by cp1, whose clock runs an hour ahead since the re-key above:
	// cp2 takes a renewal dated that far ahead for no live hold, the
	// cluster's admission policy refuses its take, and the join says the
	// fence is held and the clocks are apart, not that its token is wrong.
	held, err := e.node.TakeFence(ctx, e.admin, "rekey@cp1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	before := snapshotFiles(t, h2.Root())
	_, err = j2.JoinControlPlane(ctx, o)
	if !errors.Is(err, ha.ErrFenceHeld) || !strings.Contains(err.Error(), "check both machines' time") || strings.Contains(err.Error(), "stratum token create") {
		t.Fatalf("a join of cp2 while cp1, its clock an hour ahead, holds the fence: %v, want ErrFenceHeld naming the clocks, not a new grant", err)
	}
	t.Logf("cp2's join while cp1, its clock an hour ahead, holds the fence: %v", err)
	checkFilesAsBefore(t, before, snapshotFiles(t, h2.Root()))
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Taken by this host's clock.
	held, err = certsNodeOn(h2).TakeFence(ctx, e.admin, "rekey@cp1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j2.JoinControlPlane(ctx, o); !errors.Is(err, ha.ErrFenceHeld) {
		t.Fatalf("a join of cp2 while the fence is held: %v, want ErrFenceHeld", err)
	}
	checkFilesAsBefore(t, before, snapshotFiles(t, h2.Root()))
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if g, err := j2.DownloadCerts(ctx, kc2, m2.CertKey, nil); err != nil || g.CarriesAtRestKey {
		t.Fatalf("download of the keyless bundle: %+v, %v", g, err)
	}
	if _, err := h2.Files().Stat("/etc/stratum/encryption-config.yaml"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the at-rest key an earlier download left survived a keyless bundle (stat: %v)", err)
	}
}

// TestMaintenanceFence: the fence is exclusive until it runs out by stratum's
// clock; a lost fence fails its confirm, renewal and release; a take its own
// holder took again is lost too.
func TestMaintenanceFence(t *testing.T) {
	t.Parallel() // its own simulated cluster
	e := startCerts(t, sim.Config{ControlPlanes: 1, SpareHosts: 1, APIServers: true})
	ctx := e.ctx
	other := certsNodeOn(e.c.Host("cp2")) // another stratum process, its own clock
	f, err := e.node.TakeFence(ctx, e.admin, "join@cp1", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Renew(ctx); err != nil {
		t.Fatalf("renew: %v", err)
	}
	if _, err := other.TakeFence(ctx, e.admin, "rekey@cp2", time.Minute); !errors.Is(err, ha.ErrFenceHeld) || !strings.Contains(err.Error(), "join@cp1") {
		t.Fatalf("second take: %v, want ErrFenceHeld naming the holder", err)
	}
	if err := f.Confirm(ctx); err != nil {
		t.Fatalf("confirm: %v", err)
	}
	// cp2's clock runs a minute ahead: by its clock the lease has run out.
	e.c.Host("cp2").SetClockOffset(time.Minute)
	g, err := other.TakeFence(ctx, e.admin, "rekey@cp2", time.Minute)
	if err != nil {
		t.Fatalf("take over a run-out fence: %v", err)
	}
	for name, op := range map[string]func(context.Context) error{"confirm": f.Confirm, "renew": f.Renew, "release": f.Release} {
		if err := op(ctx); !errors.Is(err, ha.ErrFenceLost) {
			t.Errorf("%s of a lost fence: %v, want ErrFenceLost", name, err)
		}
	}
	if err := g.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := g.Confirm(ctx); !errors.Is(err, ha.ErrFenceLost) {
		t.Errorf("confirm after release: %v", err)
	}
	// Released, it is free for anyone.
	h, err := e.node.TakeFence(ctx, e.admin, "join@cp1", 30*time.Second)
	if err != nil {
		t.Fatalf("take after release: %v", err)
	}
	// The same holder taking it again (a join re-run with the same token,
	// or run with it on a second machine) takes it at once, and the first
	// take is lost: it must not go on beside the second.
	h2, err := other.TakeFence(ctx, e.admin, "join@cp1", 30*time.Second)
	if err != nil {
		t.Fatalf("the same holder's second take: %v", err)
	}
	if err := h.Confirm(ctx); !errors.Is(err, ha.ErrFenceLost) || !strings.Contains(err.Error(), "a different acquisition") {
		t.Errorf("confirm of a take the same holder took again: %v, want ErrFenceLost naming the new acquisition", err)
	}
	if err := h2.Confirm(ctx); err != nil {
		t.Errorf("confirm of the second take: %v", err)
	}
}

// TestNarrowCertsReaderBinding: a binding that still names the worker group
// is narrowed to the control-plane group; an absent one stays absent.
func TestNarrowCertsReaderBinding(t *testing.T) {
	t.Parallel() // its own simulated cluster
	e := startCerts(t, sim.Config{ControlPlanes: 1, APIServers: true})
	ctx := e.ctx
	rbs := e.admin.RbacV1().RoleBindings("kube-system")
	if err := e.node.NarrowCertsReaderBinding(ctx, e.admin); err != nil {
		t.Fatal(err)
	}
	if _, err := rbs.Get(ctx, "stratum:certs-reader", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("narrowing created a binding: %v", err)
	}
	wide := []rbacv1.Subject{
		{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: token.ControlPlaneGroup},
		{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: token.WorkerGroup},
		{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "system:bootstrappers"},
	}
	if _, err := rbs.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "stratum:certs-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "stratum:certs-reader"},
		Subjects:   wide,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.node.NarrowCertsReaderBinding(ctx, e.admin); err != nil {
		t.Fatal(err)
	}
	b, err := rbs.Get(ctx, "stratum:certs-reader", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Subjects) != 1 || b.Subjects[0].Name != token.ControlPlaneGroup || b.Subjects[0].Kind != rbacv1.GroupKind {
		t.Fatalf("subjects after narrowing: %+v", b.Subjects)
	}
	// A worker mint narrows too, through the same step.
	rv := b.ResourceVersion
	b.Subjects = wide
	if _, err := rbs.Update(ctx, b, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := token.MintWorker(ctx, e.admin, token.WorkerOptions{Server: e.cp1.APIServerURL(), CACertPEM: e.caPEM,
		NarrowReaders: func(ctx context.Context) error { return e.node.NarrowCertsReaderBinding(ctx, e.admin) }}); err != nil {
		t.Fatal(err)
	}
	b, _ = rbs.Get(ctx, "stratum:certs-reader", metav1.GetOptions{})
	if len(b.Subjects) != 1 || b.ResourceVersion == rv {
		t.Fatalf("subjects after a worker mint: %+v", b.Subjects)
	}
}

// TestFencePolicyEnforcedOnEveryAPIServer: with three apiservers, the grant
// returns only once each of them denies the probe, and then each one denies
// the bootstrap group a write.
func TestFencePolicyEnforcedOnEveryAPIServer(t *testing.T) {
	t.Parallel() // its own simulated cluster
	e := startCerts(t, sim.Config{ControlPlanes: 3, APIServers: true})
	ctx := e.ctx
	var cfgs []*rest.Config
	for _, name := range []string{"cp1", "cp2", "cp3"} {
		cfg, err := e.c.Host(name).AdminConfig()
		if err != nil {
			t.Fatal(err)
		}
		cfgs = append(cfgs, cfg)
	}
	if err := e.node.GrantCertsReaderProbing(ctx, e.admin, cfgs); err != nil {
		t.Fatal(err)
	}
	for _, cfg := range cfgs {
		c := rest.CopyConfig(cfg)
		c.Impersonate = rest.ImpersonationConfig{UserName: "system:bootstrap:yyyyyy", Groups: []string{token.ControlPlaneGroup, "system:masters", "system:authenticated"}}
		cs := kubernetes.NewForConfigOrDie(c)
		_, err := cs.CoreV1().ConfigMaps("kube-system").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "planted"}}, metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), ha.JoinFencePolicy) {
			t.Errorf("%s admitted the bootstrap group's write right after the grant: %v", cfg.Host, err)
		}
	}
	if _, err := e.admin.RbacV1().Roles("kube-system").Get(ctx, "stratum:certs-reader", metav1.GetOptions{}); err != nil {
		t.Fatalf("Role after the grant: %v", err)
	}

	// The production path (`stratum token create --control-plane` uploads
	// with UploadCertsFenced) finds the serving apiservers itself: every
	// control plane's, but one that does not answer, which serves nobody.
	// It once probed only the admin kubeconfig's own.
	if err := e.c.Host("cp3").StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	n, logs := loggedNodeOn(e.cp1)
	k, _ := ha.NewCertKey()
	if err := n.UploadCertsFenced(ctx, k, nil); err != nil {
		t.Fatalf("an upload with cp3's apiserver down: %v", err)
	}
	probed := enforcedLine(logs.String())
	for _, name := range []string{"cp1", "cp2"} {
		if !strings.Contains(probed, e.c.Host(name).APIServerURL()) {
			t.Errorf("the upload did not probe %s's apiserver for the fence policy: %q", name, probed)
		}
	}
	if strings.Contains(probed, e.c.Host("cp3").APIServerURL()) {
		t.Errorf("the upload probed cp3's stopped apiserver: %q", probed)
	}

	// Every `stratum up` grants through GrantCertsReader: it probes every
	// serving apiserver too (it once probed only the client's own).
	if err := e.c.Host("cp3").StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	mark := len(logs.String())
	if err := n.GrantCertsReader(ctx, e.admin); err != nil {
		t.Fatalf("GrantCertsReader: %v", err)
	}
	enforced := enforcedLine(logs.String()[mark:])
	for _, name := range []string{"cp1", "cp2", "cp3"} {
		if !strings.Contains(enforced, e.c.Host(name).APIServerURL()) {
			t.Errorf("GrantCertsReader did not probe %s's apiserver for the fence policy: %q", name, enforced)
		}
	}
}

// enforcedLine is the last log line of logs saying which apiservers were
// found enforcing the join fence policy.
func enforcedLine(logs string) string {
	var last string
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, "the join fence policy is enforced") {
			last = l
		}
	}
	return last
}

// TestRekeyRefusedWhenFenceLostWhileStalled: a rekey that stalls before its
// write while its fence is taken over refuses the publication and writes
// nothing.
func TestRekeyRefusedWhenFenceLostWhileStalled(t *testing.T) {
	t.Parallel() // its own simulated cluster
	e := startCerts(t, sim.Config{ControlPlanes: 1, SpareHosts: 1, APIServers: true})
	ctx := e.ctx
	e.mustMint(time.Hour)
	f, err := e.node.TakeFence(ctx, e.admin, "rekey@cp1", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	rv := e.secret().ResourceVersion
	pause := e.c.PauseAt("cp1", ha.CheckpointBeforeCertsWrite)
	k, _ := ha.NewCertKey()
	done := make(chan error, 1)
	go func() { done <- e.node.RekeySharedCerts(ctx, k, f.Confirm) }()
	select {
	case <-pause.Reached():
	case err := <-done:
		t.Fatalf("rekey ended before its write checkpoint: %v", err)
	case <-ctx.Done():
		t.Fatal("rekey never reached its write checkpoint")
	}
	// Meanwhile the fence runs out (by the successor's clock) and is taken.
	e.c.Host("cp2").SetClockOffset(time.Minute)
	if _, err := certsNodeOn(e.c.Host("cp2")).TakeFence(ctx, e.admin, "rotation@cp2", time.Minute); err != nil {
		t.Fatal(err)
	}
	pause.Release()
	if err := <-done; !errors.Is(err, ha.ErrFenceLost) {
		t.Fatalf("stalled rekey after losing its fence: %v, want ErrFenceLost", err)
	}
	if got := e.secret().ResourceVersion; got != rv {
		t.Fatalf("the refused rekey wrote the Secret (%s -> %s)", rv, got)
	}
}

// TestConcurrentMintsAllLand: mints racing on the same Secret (the first ones
// racing to create it) each land their grant and owner; none overwrites
// another.
func TestConcurrentMintsAllLand(t *testing.T) {
	t.Parallel() // its own simulated cluster
	e := startCerts(t, sim.Config{ControlPlanes: 1, APIServers: true})
	const n = 3
	var wg sync.WaitGroup
	minted := make([]*token.Minted, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			minted[i], errs[i] = e.mint(time.Hour, nil)
		}()
	}
	wg.Wait()
	var want []string
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("mint %d: %v", i, errs[i])
		}
		want = append(want, ha.GrantEntry(minted[i].ID))
	}
	s := e.secret()
	if got := certsGrantKeys(s); !slices.Equal(got, certsSorted(want...)) {
		t.Fatalf("grant entries %v, want %v", got, certsSorted(want...))
	}
	if len(s.OwnerReferences) != n {
		t.Fatalf("owners %v, want %d", s.OwnerReferences, n)
	}
}
