package ha_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/token"
	"stratum.dev/stratum/sim"
)

// TestOperatorPassCollectsExpiredTokens against a real apiserver and no
// kube-controller-manager, as on stratum's real hosts: the operator's pass
// deletes the join tokens stratum minted once expired by its clock (not a
// token another tool minted, nor one without expiry), drops the shared
// certificates' references to them and deletes the Secret with its last
// one; a mint racing that deletion lands on a Secret of its own, which its
// joiner downloads.
func TestOperatorPassCollectsExpiredTokens(t *testing.T) {
	t.Parallel() // its own simulated cluster
	e := startCerts(t, sim.Config{ControlPlanes: 1, SpareHosts: 1, APIServers: true})
	ctx := e.ctx
	secrets := e.admin.CoreV1().Secrets("kube-system")
	short := e.mustMint(time.Hour)
	long := e.mustMint(3 * time.Hour)
	worker, err := token.MintWorker(ctx, e.admin, token.WorkerOptions{Server: e.cp1.APIServerURL(), CACertPEM: e.caPEM, TTL: time.Hour, Now: e.cp1.Handle().Now})
	if err != nil {
		t.Fatal(err)
	}
	now := e.cp1.Handle().Now()
	for tok, groups := range map[string][]string{
		"other1.0123456789abcdef": {"system:bootstrappers:another-tool"},
		"other2.0123456789abcdef": {token.WorkerGroup},
	} {
		exp := now.Add(time.Minute)
		if strings.HasPrefix(tok, "other2") {
			exp = time.Time{} // stratum's group, but no expiry
		}
		s, err := token.NewSecret(tok, groups, exp, "not minted by stratum")
		if err != nil {
			t.Fatal(err)
		}
		if exp.IsZero() {
			delete(s.StringData, "expiration")
		}
		if _, err := secrets.Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	tokens := func() []string {
		t.Helper()
		list, err := secrets.List(ctx, metav1.ListOptions{FieldSelector: "type=bootstrap.kubernetes.io/token"})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, s := range list.Items {
			ids = append(ids, token.IDFromSecretName(s.Name))
		}
		slices.Sort(ids)
		return ids
	}
	sorted := func(s ...string) []string { slices.Sort(s); return s }

	// Nothing has expired: the pass changes nothing.
	rv := e.secret().ResourceVersion
	rep, err := e.node.OperatorPass(ctx, e.admin)
	if err != nil {
		t.Fatalf("first pass: %v", err)
	}
	if len(rep.TokensDeleted)+len(rep.Pruned)+len(rep.OwnersDropped) != 0 || rep.CertsDeleted {
		t.Fatalf("first pass did something: %+v", rep)
	}
	if got := e.secret().ResourceVersion; got != rv {
		t.Fatalf("first pass wrote stratum-certs (%s -> %s)", rv, got)
	}

	// 90 minutes on: the short grant and the worker token have expired; the
	// other tool's token too, but it is not stratum's.
	e.cp1.SetClockOffset(90 * time.Minute)
	rep, err = e.node.OperatorPass(ctx, e.admin)
	if err != nil {
		t.Fatalf("pass after 90 min: %v", err)
	}
	if want := sorted(short.ID, worker.ID); !slices.Equal(rep.TokensDeleted, want) {
		t.Fatalf("deleted %v, want %v", rep.TokensDeleted, want)
	}
	if want := sorted(long.ID, "other1", "other2"); !slices.Equal(tokens(), want) {
		t.Fatalf("tokens left %v, want %v", tokens(), want)
	}
	if !slices.Equal(rep.Pruned, []string{short.ID}) || !slices.Equal(rep.OwnersDropped, []string{short.ID}) || rep.CertsDeleted {
		t.Fatalf("after 90 min: %+v", rep)
	}
	s := e.secret()
	if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].UID != long.Owner.UID {
		t.Fatalf("owners after the short token went: %v", s.OwnerReferences)
	}
	if got := certsGrantKeys(s); !slices.Equal(got, []string{ha.GrantEntry(long.ID)}) {
		t.Fatalf("grant entries after the short token went: %v", got)
	}

	// Four hours on: the last grant's token has expired. A mint paused
	// before its write (it has read stratum-certs) while the pass deletes
	// the Secret, its last owner gone, must land a Secret of its own.
	e.cp1.SetClockOffset(4 * time.Hour)
	pause := e.c.PauseAt("cp1", ha.CheckpointBeforeCertsWrite)
	type minted struct {
		m   *token.Minted
		err error
	}
	done := make(chan minted, 1)
	go func() {
		m, err := e.mint(time.Hour, nil)
		done <- minted{m, err}
	}()
	select {
	case <-pause.Reached():
	case r := <-done:
		t.Fatalf("mint ended before its write checkpoint: %v", r.err)
	case <-ctx.Done():
		t.Fatal("mint never reached its write checkpoint")
	}
	rep, err = e.node.OperatorPass(ctx, e.admin)
	if err != nil {
		t.Fatalf("pass after 4 h: %v", err)
	}
	if !slices.Equal(rep.TokensDeleted, []string{long.ID}) || !rep.CertsDeleted || !slices.Equal(rep.OwnersDropped, []string{long.ID}) {
		t.Fatalf("after 4 h: %+v", rep)
	}
	if _, err := secrets.Get(ctx, ha.CertsSecretName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("stratum-certs after its last token went: %v, want NotFound", err)
	}
	pause.Release()
	r := <-done
	if r.err != nil {
		t.Fatalf("the mint racing the collection: %v", r.err)
	}
	s = e.secret()
	if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].UID != r.m.Owner.UID || !slices.Equal(certsGrantKeys(s), []string{ha.GrantEntry(r.m.ID)}) {
		t.Fatalf("stratum-certs after the racing mint: owners %v, grants %v", s.OwnerReferences, certsGrantKeys(s))
	}
	j, h, kc := e.joiner("cp2", r.m.Token)
	if _, err := j.DownloadCerts(ctx, kc, r.m.CertKey, nil); err != nil {
		t.Fatalf("the racing mint's joiner downloads: %v", err)
	}
	certsSameShared(t, h, e.c.Shared().Files())
	if want := sorted(r.m.ID, "other1", "other2"); !slices.Equal(tokens(), want) {
		t.Fatalf("tokens at the end %v, want %v", tokens(), want)
	}
}
