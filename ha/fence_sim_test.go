package ha_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/nodelock"
	"stratum.dev/stratum/internal/token"
	"stratum.dev/stratum/sim"
)

// fenceHolder is the fence Lease's holder as admin reads it, "" when unheld.
func fenceHolder(ctx context.Context, t *testing.T, cs kubernetes.Interface) string {
	t.Helper()
	if h := fenceLease(ctx, t, cs).Spec.HolderIdentity; h != nil {
		return *h
	}
	return ""
}

// TestFencedPublications: a mint's upload, a rekey and a re-upload each hold
// the maintenance fence as <operation>@<node> while they publish, release it
// after (also when the publication fails), and while another holder has it
// are refused with ErrFenceHeld, naming that holder, writing nothing.
func TestFencedPublications(t *testing.T) {
	t.Parallel() // its own simulated cluster
	e := startCerts(t, sim.Config{ControlPlanes: 1, APIServers: true})
	ctx := e.ctx
	e.mustMint(time.Hour) // the Secret exists, so "unchanged" means something
	fencedMint := func(ctx context.Context) error {
		_, err := e.mint(time.Hour, func(ctx context.Context, k string, o *metav1.OwnerReference) error {
			return e.node.UploadCertsFenced(ctx, k, o)
		})
		return err
	}
	newKey := func() string { k, _ := ha.NewCertKey(); return k }
	ops := []struct {
		name, holder string
		run          func(context.Context) error
	}{
		{"mint's upload", "token-create@cp1", fencedMint},
		{"rekey", "rekey@cp1", func(ctx context.Context) error { return e.node.RekeySharedCertsFenced(ctx, newKey()) }},
		{"re-upload", "reupload@cp1", func(ctx context.Context) error { return e.node.ReUploadCerts(ctx, newKey()) }},
	}

	// Held by another operation: each is refused before it writes anything.
	other, err := certsNodeOn(e.cp1).TakeFence(ctx, e.admin, "rotation@elsewhere", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	tokensBefore := e.bootstrapTokenCount()
	for _, op := range ops {
		rv := e.secret().ResourceVersion
		if err := op.run(ctx); !errors.Is(err, ha.ErrFenceHeld) || !strings.Contains(err.Error(), "rotation@elsewhere") {
			t.Errorf("%s while another holds the fence: %v, want ErrFenceHeld naming rotation@elsewhere", op.name, err)
		}
		if got := e.secret().ResourceVersion; got != rv {
			t.Errorf("refused %s wrote stratum-certs (resourceVersion %s -> %s)", op.name, rv, got)
		}
	}
	if n := e.bootstrapTokenCount(); n != tokensBefore {
		t.Errorf("%d bootstrap tokens after the refused mint, want the %d there before", n, tokensBefore)
	}
	if err := other.Confirm(ctx); err != nil {
		t.Fatalf("the holder lost the fence to refused operations: %v", err)
	}
	if err := other.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// Free: each takes it as itself for the publication and releases it after.
	for _, op := range ops {
		pause := e.c.PauseAt("cp1", ha.CheckpointBeforeCertsWrite)
		rv := e.secret().ResourceVersion
		done := make(chan error, 1)
		go func() { done <- op.run(ctx) }()
		select {
		case <-pause.Reached():
		case err := <-done:
			t.Fatalf("%s ended before its write checkpoint: %v", op.name, err)
		case <-ctx.Done():
			t.Fatalf("%s never reached its write checkpoint", op.name)
		}
		if got := fenceHolder(ctx, t, e.admin); got != op.holder {
			t.Errorf("%s publishing while the fence is held by %q, want %q", op.name, got, op.holder)
		}
		if _, err := e.node.TakeFence(ctx, e.admin, "rotation@elsewhere", time.Minute); !errors.Is(err, ha.ErrFenceHeld) || !strings.Contains(err.Error(), op.holder) {
			t.Errorf("another take during the %s: %v, want ErrFenceHeld naming %s", op.name, err, op.holder)
		}
		// The same operation again on this node would hold the fence
		// under the same name, taking the first's as its own (which
		// the first then finds lost): refused, by the node's lock.
		tokens := e.bootstrapTokenCount()
		if err := op.run(ctx); !errors.Is(err, nodelock.ErrBusy) || !ha.IsRefusal(err) {
			t.Errorf("a second %s on this node during the first: %v, want a refusal for the node's fence lock", op.name, err)
		}
		if n := e.bootstrapTokenCount(); n != tokens {
			t.Errorf("%d bootstrap tokens after the refused second %s, want the %d there before", n, op.name, tokens)
		}
		pause.Release()
		if err := <-done; err != nil {
			t.Fatalf("%s with the fence free: %v", op.name, err)
		}
		if got := e.secret().ResourceVersion; got == rv {
			t.Errorf("%s did not write stratum-certs", op.name)
		}
		if got := fenceHolder(ctx, t, e.admin); got != "" {
			t.Errorf("fence after the %s: held by %q, want released", op.name, got)
		}
	}

	// A publication that fails still releases the fence.
	e.c.FailAt("cp1", ha.CheckpointBeforeCertsWrite, errors.New("injected"))
	if err := e.node.RekeySharedCertsFenced(ctx, newKey()); err == nil || !strings.Contains(err.Error(), "injected") {
		t.Fatalf("rekey with an injected fault: %v", err)
	}
	if got := fenceHolder(ctx, t, e.admin); got != "" {
		t.Errorf("fence after a failed rekey: held by %q, want released", got)
	}
}

// bootstrapTokenCount is how many bootstrap-token Secrets exist.
func (e *certsEnv) bootstrapTokenCount() int {
	e.t.Helper()
	toks, err := e.admin.CoreV1().Secrets("kube-system").List(e.ctx, metav1.ListOptions{FieldSelector: "type=" + string(corev1.SecretTypeBootstrapToken)})
	if err != nil {
		e.t.Fatal(err)
	}
	return len(toks.Items)
}

// TestJoinFence: a control-plane bootstrap-token client takes, confirms,
// renews and releases the fence as its own username; while an admin holder or
// another token holds it, the take is refused with ErrFenceHeld; admission
// refuses it any other holder name, and the take refuses a hold longer than
// the policy admits before writing.
func TestJoinFence(t *testing.T) {
	t.Parallel() // its own simulated cluster
	e := startCerts(t, sim.Config{ControlPlanes: 1, SpareHosts: 1, APIServers: true})
	ctx := e.ctx
	if err := e.node.GrantCertsReader(ctx, e.admin); err != nil {
		t.Fatal(err)
	}
	joiner := certsNodeOn(e.c.Host("cp2"))
	cs, id := e.bootstrapClient(token.ControlPlaneGroup)
	cs2, id2 := e.bootstrapClient(token.ControlPlaneGroup)
	me := "system:bootstrap:" + id

	// Refusals before anything is written.
	rv := fenceLease(ctx, t, e.admin).ResourceVersion
	if _, err := joiner.TakeJoinFence(ctx, cs, id, 901*time.Second); err == nil {
		t.Error("a join fence of 901s was taken")
	}
	if _, err := joiner.TakeJoinFence(ctx, cs, "NOT-AN-ID", time.Minute); err == nil {
		t.Error("a join fence for a malformed token ID was taken")
	}
	// A token deleted since (its join downloaded the certificates with
	// it): refused as a token the cluster does not accept, with what to do,
	// never as a fence someone holds.
	gone, goneID := e.bootstrapClient(token.ControlPlaneGroup)
	if err := e.admin.CoreV1().Secrets("kube-system").Delete(ctx, "bootstrap-token-"+goneID, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The apiserver caches a token's authentication for 10 s.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		_, err := gone.CoordinationV1().Leases("kube-system").Get(ctx, ha.FenceLeaseName, metav1.GetOptions{})
		if apierrors.IsUnauthorized(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a deleted token still authenticates after 30s: %v", err)
		}
	}
	_, goneErr := joiner.TakeJoinFence(ctx, gone, goneID, time.Minute)
	if !errors.Is(goneErr, ha.ErrTokenRefused) || !strings.Contains(goneErr.Error(), "stratum token create --control-plane") || errors.Is(goneErr, ha.ErrFenceHeld) {
		t.Fatalf("join fence with a deleted token: %v, want ErrTokenRefused saying to mint a new grant", goneErr)
	}
	if got := fenceLease(ctx, t, e.admin).ResourceVersion; got != rv {
		t.Fatalf("refused takes wrote the Lease (%s -> %s)", rv, got)
	}

	// Held by an admin operation: refused, naming it.
	held, err := e.node.TakeFence(ctx, e.admin, "rekey@cp1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := joiner.TakeJoinFence(ctx, cs, id, time.Minute); !errors.Is(err, ha.ErrFenceHeld) || !strings.Contains(err.Error(), "rekey@cp1") {
		t.Fatalf("join fence while rekey@cp1 holds it: %v, want ErrFenceHeld naming it", err)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// Free: the token takes it as itself, and only as itself.
	if _, err := joiner.TakeJoinFence(ctx, cs, id2, time.Minute); err == nil || !strings.Contains(err.Error(), ha.JoinFencePolicy) {
		t.Fatalf("token %s taking the fence as token %s: %v, want the policy's denial", id, id2, err)
	}
	f, err := joiner.TakeJoinFence(ctx, cs, id, 2*time.Minute)
	if err != nil {
		t.Fatalf("join fence on a free fence: %v", err)
	}
	if f.Holder() != me || fenceHolder(ctx, t, e.admin) != me {
		t.Fatalf("join fence held as %q (Lease: %q), want %q", f.Holder(), fenceHolder(ctx, t, e.admin), me)
	}
	if err := f.Confirm(ctx); err != nil {
		t.Fatalf("confirm: %v", err)
	}
	before := fenceLease(ctx, t, e.admin).Spec.RenewTime
	e.c.Host("cp2").SetClockOffset(10 * time.Second)
	if err := f.Renew(ctx); err != nil {
		t.Fatalf("renew: %v", err)
	}
	if after := fenceLease(ctx, t, e.admin).Spec.RenewTime; after == nil || !after.After(before.Time) {
		t.Fatalf("renew did not move renewTime (%v -> %v)", before, after)
	}
	if err := f.Confirm(ctx); err != nil {
		t.Fatalf("confirm after renew: %v", err)
	}
	if _, err := e.node.TakeFence(ctx, e.admin, "rekey@cp1", time.Minute); !errors.Is(err, ha.ErrFenceHeld) || !strings.Contains(err.Error(), me) {
		t.Fatalf("admin take while the join holds the fence: %v, want ErrFenceHeld naming %s", err, me)
	}
	if _, err := certsNodeOn(e.cp1).TakeJoinFence(ctx, cs2, id2, time.Minute); !errors.Is(err, ha.ErrFenceHeld) {
		t.Fatalf("another token's join fence while %s holds it: %v, want ErrFenceHeld", me, err)
	}
	if err := f.Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	if got := fenceHolder(ctx, t, e.admin); got != "" {
		t.Fatalf("fence after the join's release: held by %q", got)
	}
	rekey, err := e.node.TakeFence(ctx, e.admin, "rekey@cp1", time.Minute)
	if err != nil {
		t.Fatalf("admin take after the join's release: %v", err)
	}
	if err := rekey.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// A token that writes itself a hold renewed in the future: admission,
	// which cannot read the time, lets it (the Lease was unheld), but by
	// stratum's clock no holder wrote it, so it holds nothing: the
	// operator's rekey takes the fence, and the next join finds it free
	// once the rekey is done. It once held the fence until the year 2126.
	l := fenceLease(ctx, t, e.admin)
	future := metav1.NewMicroTime(time.Now().Add(100 * 365 * 24 * time.Hour))
	secs := int32(900)
	l.Spec.HolderIdentity, l.Spec.AcquireTime, l.Spec.RenewTime, l.Spec.LeaseDurationSeconds = &me, &future, &future, &secs
	if _, err := cs.CoordinationV1().Leases("kube-system").Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("the token's hold from the future was not admitted (the policy changed?): %v", err)
	}
	if holder, _, err := e.node.FenceHolder(ctx); err != nil || holder != "" {
		t.Fatalf("FenceHolder with a hold renewed in the future = %q, %v; want none", holder, err)
	}
	rekey, err = e.node.TakeFence(ctx, e.admin, "rekey@cp1", time.Minute)
	if err != nil {
		t.Fatalf("admin take over a hold renewed in the future: %v", err)
	}
	if err := rekey.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := certsNodeOn(e.cp1).TakeJoinFence(ctx, cs2, id2, time.Minute); err != nil {
		t.Fatalf("a join fence after the rekey took over the hold from the future: %v", err)
	}
}
