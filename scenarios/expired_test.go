package scenarios

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"pgregory.net/rapid"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/token"
	"stratum.dev/stratum/sim"
)

// The stratum-certs Secret as the scenarios read it: kube-system/stratum-certs,
// one entry "certs-<token id>" per grant, and its data budget (the 1 MiB
// Secret limit less 64 KiB for metadata: ha's grantSecretBudget).
const (
	certsNamespace   = "kube-system"
	certsSecretName  = "stratum-certs"
	grantEntryPrefix = "certs-"
	secretBudget     = 1<<20 - 64<<10
)

// margin keeps the model away from expiry boundaries: a grant within margin
// of its expiry (on the clock that judges it) is neither live nor expired,
// and no verdict on it is checked.
const margin = 3 * time.Second

// maxJoinerSkew is how far a joiner's clock may be from the cluster's before
// its join refuses (ha's maxClockSkew: the certificates' backdating, less a
// minute).
const maxJoinerSkew = 4 * time.Minute

// apiserverTokenCache is how long kube-apiserver keeps a token's successful
// authentication (its built-in TokenSuccessCacheTTL, not a flag): a
// bootstrap token used within that long still authenticates after it has
// expired or been deleted. A refusal is expected only of a grant whose
// token was not used within it (docs/security.md).
const apiserverTokenCache = 10 * time.Second

// expired is one check of TestExpiredGrant: grants minted with drawn
// lifetimes on cp1's clock, stratum's own clock skewed by drawn offsets, some
// tokens deleted or left to expire for real, prune passes interleaved with
// mints and joins.
type expired struct {
	*world
	// prober is the spare the joins run on: each join is stopped at
	// CheckpointBeforeIntent (past discovery, the bundle download, the
	// node's certificates and the health gate, before anything is added), so
	// one host checks every grant; converge joins it for real.
	prober *sim.Host
	grants []*grant
	stats  *expiredStats
}

// expiredStats count what the run exercised, for its log.
type expiredStats struct {
	mu                                                                     sync.Mutex
	refusedJoins, liveJoins, prunesDropping, prunesNoop, deletes, expiries int
	retiredJoins, rekeys, reuploads, skewedJoins                           int
}

func TestExpiredGrant(t *testing.T) {
	st := &expiredStats{}
	t.Cleanup(func() {
		t.Logf("ExpiredGrant: joins refused %d, live joins %d, joins with a retired key %d, joins refused for the joiner's clock %d, prunes that dropped %d, no-op prunes %d, tokens deleted %d, waited out %d, rekeys %d, re-uploads %d",
			st.refusedJoins, st.liveJoins, st.retiredJoins, st.skewedJoins, st.prunesDropping, st.prunesNoop, st.deletes, st.expiries, st.rekeys, st.reuploads)
	})
	explored.require("ExpiredGrant", "mint", "rekey", "reupload", "skewedJoin", "setClock", "prune", "deleteToken")
	property(t, func(rt *rapid.T) {
		// Each part of a check that is not a drawn action is a row of
		// the coverage table's time section too.
		var s *expired
		explored.part("prologue: the world", func() { s = &expired{world: newWorld(rt, 1), stats: st} })
		s.prober = s.c.Host("cp2")
		explored.ran("mint")
		explored.part("prologue: retire tour", func() {
			s.mint(rt)
			s.retireTour(rt)
		})
		explored.part("prologue: clock tour", func() { s.clockTour(rt) })
		explored.part("prologue: refusal tour", func() { s.refusalTour(rt) })
		rt.Repeat(explored.actions(map[string]func(*rapid.T){
			"mint":        s.mint,
			"deleteToken": s.deleteToken,
			"waitExpiry":  s.waitExpiry,
			"setClock":    s.setClock,
			"prune":       s.prune,
			"join":        s.join,
			"rekey":       s.rekey,
			"reupload":    s.reupload,
			"":            s.check,
		}))
		explored.part("converge", s.converge)
	})
}

// secret reads stratum-certs through cp1's admin client.
func (s *expired) secret() *corev1.Secret {
	s.t.Helper()
	sec, err := s.admin.CoreV1().Secrets(certsNamespace).Get(s.ctx, certsSecretName, metav1.GetOptions{})
	if err != nil {
		s.t.Fatalf("read %s/%s: %v", certsNamespace, certsSecretName, err)
	}
	return sec
}

// stratumNow is cp1's clock: what judges expiry in a mint's and a prune's
// drop of expired entries.
func (s *expired) stratumNow() time.Time { return s.cp1.Handle().Now() }

// liveAt reports whether g is live at now beyond the margin; deadAt whether
// it is deleted or expired beyond it.
func liveAt(g *grant, now time.Time) bool { return !g.Deleted && now.Add(margin).Before(g.Expires) }
func deadAt(g *grant, now time.Time) bool { return g.Deleted || !now.Add(-margin).Before(g.Expires) }

// entriesKept checks that a publication or prune that ran between from and
// to (cp1's clock) kept every entry of before whose grant was live all the
// while, and reports whether any grant was dead or near its expiry (something
// may have been dropped).
func (s *expired) entriesKept(op string, before, after *corev1.Secret, from, to time.Time) (someMayDrop bool) {
	s.t.Helper()
	for _, g := range s.grants {
		e := grantEntryPrefix + g.ID
		if _, had := before.Data[e]; !had {
			continue
		}
		_, has := after.Data[e]
		switch {
		case liveAt(g, to):
			if !has {
				s.t.Fatalf("%s dropped the entry of live grant %s (expires %s, stratum's clock %s..%s)", op, g.ID, g.Expires.Format(time.RFC3339), from.Format(time.RFC3339), to.Format(time.RFC3339))
			}
		case deadAt(g, from):
			someMayDrop = true
			if !has && op == "prune" {
				continue
			}
			if has && op == "prune" {
				s.t.Fatalf("prune kept the entry of grant %s, which is %s (expires %s, stratum's clock %s)", g.ID, map[bool]string{true: "deleted", false: "expired"}[g.Deleted], g.Expires.Format(time.RFC3339), from.Format(time.RFC3339))
			}
		default:
			someMayDrop = true
		}
	}
	return someMayDrop
}

// mint mints a grant with a drawn lifetime: seconds (to expire for real
// within the check) or minutes to hours (to be expired by stratum's clock
// only, through a drawn offset). The mint's own drop of expired entries must
// keep every live one.
func (s *expired) mint(t *rapid.T) {
	ttl := drawDuration(t, "ttl", "4s", "20m", "1h", "2h", "5h")
	before := s.secretOrEmpty()
	from := s.stratumNow()
	g := s.world.mint(ttl)
	to := s.stratumNow()
	s.grants = append(s.grants, g)
	after := s.secret()
	s.entriesKept("mint", before, after, from, to)
	if _, ok := after.Data[grantEntryPrefix+g.ID]; !ok {
		t.Fatalf("the mint of grant %s did not publish its entry", g.ID)
	}
}

func (s *expired) secretOrEmpty() *corev1.Secret {
	sec, err := s.admin.CoreV1().Secrets(certsNamespace).Get(s.ctx, certsSecretName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return &corev1.Secret{}
	}
	if err != nil {
		s.t.Fatalf("read %s/%s: %v", certsNamespace, certsSecretName, err)
	}
	return sec
}

func (s *expired) pick(t *rapid.T, ok func(*grant) bool, what string) *grant {
	var cands []*grant
	for _, g := range s.grants {
		if ok(g) {
			cands = append(cands, g)
		}
	}
	if len(cands) == 0 {
		t.Skip("no grant " + what)
	}
	return s.byID(rapid.SampledFrom(ids(cands)).Draw(t, what))
}

func ids(gs []*grant) []string {
	out := make([]string, len(gs))
	for i, g := range gs {
		out[i] = g.ID
	}
	return out
}

func (s *expired) byID(id string) *grant {
	for _, g := range s.grants {
		if g.ID == id {
			return g
		}
	}
	return nil
}

// tokenClient is a client authenticating with g's token.
func (s *expired) tokenClient(g *grant) kubernetes.Interface {
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: s.cp1.APIServerURL(), BearerToken: g.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: s.ca}, Timeout: apiCallBound})
	if err != nil {
		s.t.Fatal(err)
	}
	return cs
}

// deleteToken deletes a drawn grant's bootstrap-token Secret and waits until
// the apiserver no longer accepts the token.
func (s *expired) deleteToken(t *rapid.T) {
	s.deleteGrantToken(t, s.pick(t, func(g *grant) bool { return !g.Deleted }, "token to delete"))
}

// deleteGrantToken deletes g's bootstrap-token Secret and, unless a join
// authenticated with it within the apiserver's cache of successes, waits
// until the apiserver no longer accepts the token. Its authenticator reads
// Secrets through an informer and caches a success for apiserverTokenCache,
// so a probe that lands before the informer has seen the deletion keeps the
// token accepted that long: the probes start once a watch through the same
// apiserver has delivered the deletion. A token a join used that recently
// may be accepted until the cache lets it go; joinAt checks no verdict on it
// until then, by which time the informer has long seen the deletion, so
// nothing waits for it here (it cost about 3 s a check).
func (s *expired) deleteGrantToken(t *rapid.T, g *grant) {
	name := token.SecretPrefix + g.ID
	cached := !g.LastAuth.IsZero() && time.Since(g.LastAuth) < apiserverTokenCache+margin
	var w watch.Interface
	if !cached {
		var err error
		if w, err = s.admin.CoreV1().Secrets(token.Namespace).Watch(s.ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name}); err != nil {
			t.Fatalf("watch token %s: %v", g.ID, err)
		}
		defer w.Stop()
	}
	if err := s.admin.CoreV1().Secrets(token.Namespace).Delete(s.ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete token %s: %v", g.ID, err)
	}
	g.Deleted = true
	s.count(func(st *expiredStats) { st.deletes++ })
	if cached {
		s.c.Events().Record("cp1", "fault", "bootstrap token %s deleted (used by a join %s ago: no verdict on it until the apiserver's token cache lets it go)", g.ID, time.Since(g.LastAuth).Round(time.Millisecond))
		return
	}
	s.c.Events().Record("cp1", "fault", "bootstrap token %s deleted", g.ID)
	for seen, bound := false, time.After(5*time.Second); !seen; {
		select {
		case e, ok := <-w.ResultChan():
			seen = !ok || e.Type == watch.Deleted
		case <-bound:
			seen = true // the probes below still wait for the refusal
		}
	}
	cs := s.tokenClient(g)
	if ok, last := eventually(s.ctx, 30*time.Second, func() (bool, string) {
		_, err := cs.CoreV1().Secrets(certsNamespace).Get(s.ctx, certsSecretName, metav1.GetOptions{})
		return apierrors.IsUnauthorized(err), fmt.Sprint(err)
	}); !ok {
		t.Fatalf("the apiserver still accepts deleted token %s after 30s: %s", g.ID, last)
	}
}

// waitExpiry waits out a drawn short-lived grant's real lifetime, so the
// apiserver refuses its token.
func (s *expired) waitExpiry(t *rapid.T) {
	g := s.pick(t, func(g *grant) bool {
		return !g.Deleted && time.Now().Before(g.Expires) && time.Until(g.Expires) < time.Minute
	}, "short grant to expire")
	s.c.Events().Record("cp1", "action", "waiting out grant %s (expires %s)", g.ID, g.Expires.Format(time.RFC3339))
	if ok, _ := eventually(s.ctx, time.Until(g.Expires)+margin+time.Second, func() (bool, string) {
		return !time.Now().Add(-margin).Before(g.Expires), ""
	}); !ok {
		t.Fatalf("grant %s never expired", g.ID)
	}
	s.count(func(st *expiredStats) { st.expiries++ })
}

// drawDuration draws one of the durations, written as time.ParseDuration
// reads them (so the draw prints readably).
func drawDuration(t *rapid.T, label string, choices ...string) time.Duration {
	d, err := time.ParseDuration(rapid.SampledFrom(choices).Draw(t, label))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// setClock skews stratum's clock on cp1 (the servers' clocks do not move).
func (s *expired) setClock(t *rapid.T) {
	d := drawDuration(t, "clock offset", "0s", "30m", "1h30m", "3h", "6h")
	s.cp1.SetClockOffset(d)
}

// prune runs PruneExpiredGrants on cp1: it drops exactly the expired and
// deleted grants' entries (never a live one) and, when none is expired,
// writes nothing (the resourceVersion stays).
func (s *expired) prune(t *rapid.T) {
	before := s.secret()
	from := s.stratumNow()
	if err := nodeOn(s.cp1).PruneExpiredGrants(s.ctx, s.admin); err != nil {
		t.Fatalf("prune: %v", err)
	}
	to := s.stratumNow()
	after := s.secret()
	mayDrop := s.entriesKept("prune", before, after, from, to)
	s.count(func(st *expiredStats) {
		if after.ResourceVersion != before.ResourceVersion {
			st.prunesDropping++
		} else {
			st.prunesNoop++
		}
	})
	if !mayDrop && after.ResourceVersion != before.ResourceVersion {
		t.Fatalf("prune wrote stratum-certs (resourceVersion %s -> %s) though no grant was expired or deleted", before.ResourceVersion, after.ResourceVersion)
	}
}

// join runs a control-plane join with a drawn grant on the prober, stopped
// at CheckpointBeforeIntent. A grant whose token is deleted or expired (the
// apiserver's clock) is refused with ErrTokenRefused before the bundle is
// read: the join never reaches CheckpointAfterDownload, writes no file and
// adds no member. A live grant whose entry is still published (or the
// newest, whose key seals the legacy entry too) gets through to the stop.
func (s *expired) join(t *rapid.T) {
	g := s.byID(rapid.SampledFrom(ids(s.grants)).Draw(t, "grant"))
	if skip := s.joinWith(t, g); skip != "" {
		t.Skip(skip)
	}
}

// joinWith is join with grant g; it returns why no verdict on g can be
// checked now ("" when it was checked).
func (s *expired) joinWith(t *rapid.T, g *grant) (skip string) {
	// The joiner's own clock, drawn: within the certificates' backdating
	// the verdicts stand; beyond it the join refuses at discovery.
	return s.joinAt(t, g, drawDuration(t, "joiner clock offset", "0s", "0s", "2m", "-2m", "2h", "-3h"))
}

// joinAt is joinWith from a joiner whose clock is skew off.
func (s *expired) joinAt(t *rapid.T, g *grant, skew time.Duration) (skip string) {
	now := time.Now()
	refused := deadAt(g, now)
	if refused && !g.LastAuth.IsZero() && now.Sub(g.LastAuth) < apiserverTokenCache+margin {
		return "dead grant whose token authenticated within the apiserver's token cache"
	}
	sec := s.secret()
	_, entry := sec.Data[grantEntryPrefix+g.ID]
	// A retired grant's token is live, its key must not open the bundle.
	retired := !refused && liveAt(g, now) && g.Retired
	live := !retired && liveAt(g, now) && (entry || g == s.grants[len(s.grants)-1])
	if !refused && !live && !retired {
		return "grant near its expiry, or live with its entry dropped by stratum's clock"
	}
	h := s.prober
	h.SetClockOffset(skew)
	defer h.SetClockOffset(0)
	downloads := len(s.hostEvents(h, "checkpoint", ha.CheckpointAfterDownload))
	discoveries := len(s.hostEvents(h, "checkpoint", ha.CheckpointAfterDiscovery))
	s.c.FailAt(h.Name(), ha.CheckpointBeforeIntent, errStopBeforeIntent)
	defer s.c.Disarm(h.Name(), ha.CheckpointBeforeIntent)
	err := joinOn(t, s.ctx, h, g.JoinOptions)
	if skew > maxJoinerSkew || skew < -maxJoinerSkew {
		explored.invariant("a joiner whose clock is off refuses at discovery")
		if !errors.Is(err, ha.ErrClockSkew) || !ha.IsRefusal(err) {
			t.Fatalf("a join from a host whose clock is %s off = %s, want a refusal with ErrClockSkew", skew, joinErr(err))
		}
		if n := len(s.hostEvents(h, "checkpoint", ha.CheckpointAfterDiscovery)); n != discoveries {
			t.Fatalf("a join from a host whose clock is %s off went past discovery", skew)
		}
		s.count(func(st *expiredStats) { st.skewedJoins++ })
		return ""
	}
	if !refused {
		g.LastAuth = time.Now()
	}
	switch {
	case refused:
		if !errors.Is(err, ha.ErrTokenRefused) {
			t.Fatalf("a join with %s grant %s = %s, want ErrTokenRefused", map[bool]string{true: "deleted", false: "expired"}[g.Deleted], g.ID, joinErr(err))
		}
		if n := len(s.hostEvents(h, "checkpoint", ha.CheckpointAfterDownload)); n != downloads {
			t.Fatalf("a join with refused grant %s read the bundle (reached %s)", g.ID, ha.CheckpointAfterDownload)
		}
	case retired:
		explored.invariant("a certificate-key minted before a rekey or re-upload never decrypts")
		if !errors.Is(err, ha.ErrBundleOpen) {
			t.Fatalf("a join with grant %s, retired by a rekey or re-upload since its mint but its token live, = %s, want ErrBundleOpen (its certificate-key must no longer open the bundle)", g.ID, joinErr(err))
		}
		if n := len(s.hostEvents(h, "checkpoint", ha.CheckpointAfterDownload)); n != downloads {
			t.Fatalf("a join with retired grant %s got the shared certificates (reached %s)", g.ID, ha.CheckpointAfterDownload)
		}
	case !errors.Is(err, errStopBeforeIntent):
		t.Fatalf("a join with live grant %s (expires %s) = %s, want it to reach %s", g.ID, g.Expires.Format(time.RFC3339), joinErr(err), ha.CheckpointBeforeIntent)
	}
	s.count(func(st *expiredStats) {
		switch {
		case refused:
			st.refusedJoins++
		case retired:
			st.retiredJoins++
		default:
			st.liveJoins++
		}
	})
	if ms, _ := s.members(); len(ms) != 1 {
		t.Fatalf("a join stopped before its member-add (grant %s) changed membership: %v", g.ID, ms)
	}
	if hasFile(h, nodestate.Path) || hasFile(h, ha.JoinIntentPath()) || hasFile(h, "/etc/stratum/pki/ca.key") {
		t.Fatalf("a join that did not finish left state, intent or the shared CA key on %s", h.Name())
	}
	return ""
}

// retireTour starts every check, after its first mint: in a drawn order, a
// rekey and a re-upload each retire the newest grant, a join with it is
// tried (its key must no longer decrypt), and a fresh grant is minted. Both
// publications run in every check, whatever the drawn actions after.
func (s *expired) retireTour(t *rapid.T) {
	retire := map[string]func(*rapid.T){"rekey": s.rekey, "reupload": s.reupload}
	for _, what := range rapid.Permutation([]string{"rekey", "reupload"}).Draw(t, "retire order") {
		g := s.grants[len(s.grants)-1]
		explored.ran(what)
		retire[what](t)
		s.joinWith(t, g)
		s.mint(t)
	}
}

// clockTour runs, in every check, what a skewed clock does to grants: a
// join from a host whose clock is beyond the certificates' backdating
// (refused at discovery, nothing read), then stratum's clock on cp1 skewed
// by a drawn offset and a prune by it (only grants expired by that clock
// go). Drawn among the other actions too, each could miss a short run.
// The join uses the newest grant, or, when that one is already within the
// margin of its expiry (a drawn 4 s lifetime and a slow second), a grant
// minted for the tour with an hour's lifetime: the join must be judged, and
// a grant near its expiry has no verdict.
func (s *expired) clockTour(t *rapid.T) {
	explored.ran("skewedJoin")
	g := s.grants[len(s.grants)-1]
	if !liveAt(g, time.Now()) {
		g = s.world.mint(time.Hour)
		s.grants = append(s.grants, g)
	}
	if skip := s.joinAt(t, g, drawDuration(t, "tour joiner clock offset", "2h", "-3h")); skip != "" {
		t.Fatalf("the clock tour's join with the newest grant %s was not judged: %s", g.ID, skip)
	}
	explored.ran("setClock")
	s.setClock(t)
	explored.ran("prune")
	s.prune(t)
}

// refusalTour runs, in every check, the verdict the property is named for:
// a join with a grant whose token is gone is refused before the bundle is
// read. A fresh grant is minted and its token deleted — never used, so the
// apiserver holds no cached success for it and refuses it at once — and a
// join with it tried. Drawn among the other actions, such a join can miss a
// short run: at the CI budget (3 checks, steps=8, seed 1) none was drawn.
func (s *expired) refusalTour(t *rapid.T) {
	s.mint(t)
	g := s.grants[len(s.grants)-1]
	explored.ran("deleteToken")
	s.deleteGrantToken(t, g)
	if skip := s.joinAt(t, g, 0); skip != "" {
		t.Fatalf("the refusal tour's join with deleted grant %s was not judged: %s", g.ID, skip)
	}
}

// rekey rekeys the shared certificates on cp1 under the maintenance fence
// (RekeySharedCertsFenced, as `stratum certs rekey` does): every grant
// retires.
func (s *expired) rekey(t *rapid.T) {
	s.retireAll(t, "rekey", nodeOn(s.cp1).RekeySharedCertsFenced)
	s.count(func(st *expiredStats) { st.rekeys++ })
}

// reupload re-seals the shared certificates on cp1 under a new key, as a CA
// rotation does (ReUploadCerts, which takes the fence): every grant retires.
func (s *expired) reupload(t *rapid.T) {
	s.retireAll(t, "re-upload", nodeOn(s.cp1).ReUploadCerts)
	s.count(func(st *expiredStats) { st.reuploads++ })
}

// retireAll publishes the shared certificates under a fresh key with
// publish; in the same write every grant's entry goes (none survives in the
// Secret), and from then on no grant minted before may decrypt (join).
func (s *expired) retireAll(t *rapid.T, what string, publish func(context.Context, string) error) {
	key, err := ha.NewCertKey()
	if err != nil {
		t.Fatal(err)
	}
	if err := publish(s.ctx, key); err != nil {
		t.Fatalf("%s on cp1: %v", what, err)
	}
	s.c.Events().Record("cp1", "action", "%s of the shared certificates under a new key: every grant retires", what)
	for _, g := range s.grants {
		g.Retired = true
	}
	explored.invariant("a rekey or re-upload retires every grant's entry")
	for k := range s.secret().Data {
		if strings.HasPrefix(k, grantEntryPrefix) {
			t.Fatalf("after a %s, stratum-certs still holds the grant entry %s: its certificate-key would still decrypt", what, k)
		}
	}
}

func (s *expired) count(f func(*expiredStats)) {
	s.stats.mu.Lock()
	defer s.stats.mu.Unlock()
	f(s.stats)
}

// hostEvents are h's events of kind whose text contains what.
func (s *expired) hostEvents(h *sim.Host, kind, what string) []sim.Event {
	var out []sim.Event
	for _, e := range s.c.Events().Find(kind, what) {
		if e.Host == h.Name() {
			out = append(out, e)
		}
	}
	return out
}

// check: the Secret within its budget, the worker token refused, the data
// intact.
func (s *expired) check(t *rapid.T) {
	explored.invariant("stratum-certs within its size budget")
	if sec := s.secretOrEmpty(); dataSize(sec.Data) > secretBudget {
		t.Fatalf("stratum-certs holds %d bytes of data, over its %d-byte budget", dataSize(sec.Data), secretBudget)
	}
	s.checkWorkerRefused()
	s.checkSentinels(s.admin, "cp1")
}

func dataSize(data map[string][]byte) int {
	n := 0
	for k, v := range data {
		n += len(k) + len(v)
	}
	return n
}

// converge: a final prune, then a live grant (minted now if none is) joins
// the prober for real; two healthy voters.
func (s *expired) converge() {
	t := s.t
	s.cp1.SetClockOffset(0)
	s.prune(t)
	var live *grant
	for _, g := range s.grants {
		if _, ok := s.secret().Data[grantEntryPrefix+g.ID]; ok && liveAt(g, time.Now().Add(time.Minute)) {
			live = g
		}
	}
	if live == nil {
		live = s.world.mint(time.Hour)
		s.grants = append(s.grants, live)
	}
	if err := joinOn(t, s.ctx, s.prober, live.JoinOptions); err != nil {
		t.Fatalf("the join with live grant %s: %v", live.ID, err)
	}
	if err := upOn(t, s.ctx, s.prober); err != nil {
		t.Fatalf("stratum up after the join: %v", err)
	}
	s.world.converge([]*sim.Host{s.prober})
}
