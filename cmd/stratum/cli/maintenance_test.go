package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/certbundle"
	"stratum.dev/stratum/internal/host"
	"stratum.dev/stratum/sim"
)

// TestCertsRekeyReuploadAndOperatorPass against a real apiserver: rekey
// retires a pending grant's entry; while another operation holds the
// maintenance fence rekey and reupload refuse with the Secret unchanged;
// reupload publishes once the fence is free; operator pass runs.
func TestCertsRekeyReuploadAndOperatorPass(t *testing.T) {
	t.Parallel() // its own simulated cluster or host
	_, cp1, opts := upOneControlPlane(t, 1)
	d := cp1.Handle()
	code, out, errOut := runCLI(t, opts, "token", "create", "--control-plane")
	if code != ExitOK {
		t.Fatalf("token create: exit %d\n%s", code, errOut)
	}
	id := mintedID(out)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs, err := adminClient(d, nil)
	if err != nil {
		t.Fatal(err)
	}
	certs := func() (rv string, grants []string) {
		t.Helper()
		s, err := cs.CoreV1().Secrets("kube-system").Get(ctx, "stratum-certs", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for k := range s.Data {
			if strings.HasPrefix(k, certbundle.GrantEntryPrefix) {
				grants = append(grants, k)
			}
		}
		return s.ResourceVersion, grants
	}
	if _, g := certs(); len(g) != 1 || g[0] != certbundle.GrantEntryPrefix+id {
		t.Fatalf("grant entries after the mint: %v", g)
	}

	// Another operation holds the fence: both refuse, nothing written.
	n := ha.NewNode(ha.Env{Host: d})
	fence, err := n.TakeFence(ctx, cs, "ca-rotation@elsewhere", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	rv, _ := certs()
	for _, verb := range []string{"rekey", "reupload"} {
		code, _, errOut := runCLI(t, opts, "certs", verb)
		if code != ExitRefused || !strings.Contains(errOut, "maintenance fence is held") || !strings.Contains(errOut, "ca-rotation@elsewhere") {
			t.Fatalf("certs %s under another's fence: exit %d\n%s", verb, code, errOut)
		}
		code, out, errOut := runCLI(t, opts, "certs", verb, "--dry-run")
		if code != ExitRefused || !strings.Contains(out, "ca-rotation@elsewhere") {
			t.Fatalf("certs %s --dry-run under another's fence: exit %d\n%s%s", verb, code, out, errOut)
		}
	}
	if got, _ := certs(); got != rv {
		t.Fatalf("refused rekey/reupload changed stratum-certs (resourceVersion %s -> %s)", rv, got)
	}
	if err := fence.Release(ctx); err != nil {
		t.Fatal(err)
	}

	if code, out, errOut := runCLI(t, opts, "certs", "rekey"); code != ExitOK || !strings.Contains(out, "retired") {
		t.Fatalf("certs rekey: exit %d\n%s\n%s", code, out, errOut)
	}
	if _, g := certs(); len(g) != 0 {
		t.Fatalf("grant entries after the rekey: %v, want none", g)
	}
	if code, out, errOut := runCLI(t, opts, "certs", "reupload"); code != ExitOK {
		t.Fatalf("certs reupload: exit %d\n%s\n%s", code, out, errOut)
	}
	if code, out, errOut := runCLI(t, opts, "operator", "pass"); code != ExitOK || !strings.Contains(out, "no started learner to promote") || !strings.Contains(out, "no expired join token to delete") {
		t.Fatalf("operator pass: exit %d\n%s\n%s", code, out, errOut)
	}

	// Three hours on, the token (2 h) has expired: the pass deletes it and,
	// it being the shared certificates' only owner, them too, as
	// kube-controller-manager's token cleaner and garbage collector would.
	cp1.SetClockOffset(3 * time.Hour)
	code, out, errOut = runCLI(t, opts, "operator", "pass")
	if code != ExitOK || !strings.Contains(out, "deleted expired join tokens: "+id) || !strings.Contains(out, "deleted the shared certificates") {
		t.Fatalf("operator pass 3 h on: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, name := range []string{"bootstrap-token-" + id, "stratum-certs"} {
		if _, err := cs.CoreV1().Secrets("kube-system").Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("Secret %s after the pass 3 h on: %v, want NotFound", name, err)
		}
	}
}

// TestCertsCheckAndRenew: certs check lists each CA, leaf and
// kubeconfig client certificate with its expiry (table and JSON) and the key
// age; on a host whose clock has passed the leaves' expiry it exits 1 naming
// them. certs renew, stopped once by a fault after its leaves, converges on a
// re-run: new leaves, services restarted onto them and serving; with no
// supervisor it renews, nothing running to restart.
func TestCertsCheckAndRenew(t *testing.T) {
	t.Parallel() // its own simulated cluster or host
	c, cp1, opts := upOneControlPlane(t, 1)
	d := cp1.Handle()
	if code, _, errOut := runCLI(t, opts, "token", "create", "--control-plane"); code != ExitOK {
		t.Fatalf("token create: exit %d\n%s", code, errOut)
	}
	code, out, errOut := runCLI(t, opts, "certs", "check", "-o", "json")
	if code != ExitOK {
		t.Fatalf("certs check -o json: exit %d\n%s\n%s", code, out, errOut)
	}
	var rep certsReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("certs check -o json: %v\n%s", err, out)
	}
	kinds := map[string]certInfo{}
	for _, ci := range rep.Certificates {
		kinds[ci.Name] = ci
	}
	for name, kind := range map[string]string{"ca.crt": "ca", "etcd/ca.crt": "ca", "apiserver.crt": "leaf", "etcd/server.crt": "leaf", "admin.conf": "client"} {
		ci, ok := kinds[name]
		if !ok || ci.Kind != kind || ci.DaysLeft < 300 {
			t.Errorf("%s reported as %+v (present %v), want kind %s with about a year left", name, ci, ok, kind)
		}
	}
	if rep.CertificateKeySetAt == nil || rep.CertificateKeyError != "" {
		t.Errorf("key age after a mint: set at %v, error %q", rep.CertificateKeySetAt, rep.CertificateKeyError)
	}
	code, out, _ = runCLI(t, opts, "certs", "check")
	if code != ExitOK || !strings.Contains(out, "apiserver.crt") || !strings.Contains(out, "certificate-key set at") {
		t.Fatalf("certs check: exit %d\n%s", code, out)
	}
	// `status` says so ahead: a warning within 30 days of the leaves'
	// expiry (exit 0), a problem once they have expired (exit 1).
	cp1.SetClockOffset(350 * 24 * time.Hour)
	code, out, errOut = runCLI(t, opts, "status")
	if code != ExitOK || !strings.Contains(out, "warning: certificates expire soon: ") || !strings.Contains(out, "apiserver.crt expires on") || !strings.Contains(out, "stratum certs renew") {
		t.Fatalf("status 350 days on: exit %d\n%s\n%s", code, out, errOut)
	}
	cp1.SetClockOffset(400 * 24 * time.Hour)
	code, out, errOut = runCLI(t, opts, "certs", "check")
	if code != ExitFail || !strings.Contains(errOut, "apiserver.crt expired on") || !strings.Contains(out, "apiserver.crt") {
		t.Fatalf("certs check 400 days on: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut = runCLI(t, opts, "status", "-o", "json")
	var st statusReport
	if jerr := json.Unmarshal([]byte(out), &st); code != ExitFail || jerr != nil || len(st.CertificatesExpired) == 0 || !strings.Contains(st.Problem, "certificates expired: ") {
		t.Fatalf("status -o json 400 days on: exit %d (%v)\n%s\n%s", code, jerr, out, errOut)
	}
	// A clock an hour behind the one that issued them (past the issue's
	// 5-minute backdating): every certificate is not valid yet, a problem
	// for the clock, not for a renewal.
	cp1.SetClockOffset(-time.Hour)
	code, out, errOut = runCLI(t, opts, "certs", "check")
	if code != ExitFail || !strings.Contains(errOut, "apiserver.crt is not valid until") || !strings.Contains(errOut, "set the time") || strings.Contains(errOut, "expired") {
		t.Fatalf("certs check an hour behind: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut = runCLI(t, opts, "status", "-o", "json")
	st = statusReport{}
	if jerr := json.Unmarshal([]byte(out), &st); code != ExitFail || jerr != nil || len(st.CertificatesNotYetValid) == 0 || len(st.CertificatesExpired) != 0 || !strings.Contains(st.Problem, "certificates not valid yet: ") {
		t.Fatalf("status -o json an hour behind: exit %d (%v)\n%s\n%s", code, jerr, out, errOut)
	}
	cp1.SetClockOffset(0)

	// certs renew: a fault after the leaves stops it; the re-run converges,
	// the leaves are new and the services serve them.
	before := kinds["apiserver.crt"].NotAfter
	oldCrt, _ := d.ReadFile("/etc/stratum/pki/apiserver.crt")
	oldKey, _ := d.ReadFile("/etc/stratum/pki/apiserver.key")
	time.Sleep(1100 * time.Millisecond) // a later NotAfter, to the second
	c.FailAt(cp1.Name(), ha.CheckpointRenewAfterLeaves, errors.New("injected fault"))
	if code, _, errOut := runCLI(t, opts, "certs", "renew"); code != ExitFail || !strings.Contains(errOut, "injected fault") {
		t.Fatalf("certs renew with a fault after its leaves: exit %d\n%s", code, errOut)
	}
	code, out, errOut = runCLI(t, opts, "certs", "renew")
	if code != ExitOK || !strings.Contains(out, "restarted onto them: etcd, kube-apiserver, kube-vip") || !strings.Contains(out, "/etc/stratum/pki/apiserver.crt") {
		t.Fatalf("certs renew: exit %d\n%s\n%s", code, out, errOut)
	}
	if newCrt, _ := d.ReadFile("/etc/stratum/pki/apiserver.crt"); bytes.Equal(newCrt, oldCrt) {
		t.Fatal("certs renew left the apiserver certificate as it was")
	}
	// Each leaf keeps its key, so a renewal stopped between two writes
	// leaves every pair matching.
	if newKey, _ := d.ReadFile("/etc/stratum/pki/apiserver.key"); !bytes.Equal(newKey, oldKey) || strings.Contains(out, "apiserver.key") {
		t.Fatalf("certs renew replaced the apiserver key:\n%s", out)
	}
	rep = certsReport{}
	code, out, errOut = runCLI(t, opts, "certs", "check", "-o", "json")
	if code != ExitOK || json.Unmarshal([]byte(out), &rep) != nil {
		t.Fatalf("certs check after renew: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, ci := range rep.Certificates {
		if ci.Name == "apiserver.crt" && !ci.NotAfter.After(before) {
			t.Fatalf("apiserver.crt expires %s after renew, %s before", ci.NotAfter, before)
		}
	}
	// The renewed apiserver, etcd and admin kubeconfig serve a mint and a
	// health check.
	if code, _, errOut := runCLI(t, opts, "token", "create", "--control-plane"); code != ExitOK {
		t.Fatalf("token create after renew: exit %d\n%s", code, errOut)
	}
	if code, _, errOut := runCLI(t, opts, "etcd", "health"); code != ExitOK {
		t.Fatalf("etcd health after renew: exit %d\n%s", code, errOut)
	}

	// A stop of the VIP candidate whose answer is lost (it went through):
	// the renewal fails, naming it, and starts the candidate again, which a
	// re-run, finding it stopped, would never have done.
	lostStop := Options{Host: func() (host.Host, error) { return stopAnswerLost{d}, nil }, Checkpoint: d.Checkpoint}
	code, out, errOut = runCLI(t, lostStop, "certs", "renew")
	if code != ExitFail || !strings.Contains(errOut, "to hand the VIP over") {
		t.Fatalf("certs renew whose VIP stop's answer was lost: exit %d, want 1 naming the handover\n%s\n%s", code, out, errOut)
	}
	if st, err := d.ServiceStatus(context.Background(), ha.ServiceVIP); err != nil || !st.Running {
		t.Fatalf("after a renewal whose VIP stop failed, the VIP candidate: %+v, %v; want it running again", st, err)
	}

	// With no supervisor (its socket unanswered, as on a real host whose
	// `stratum up` is stopped) nothing runs to restart: the renew succeeds,
	// saying the services read the files when they start.
	unsupervised := Options{Host: func() (host.Host, error) {
		return sim.Unsupervised(d, filepath.Join(t.TempDir(), "supervisor.sock")), nil
	}}
	code, out, errOut = runCLI(t, unsupervised, "certs", "renew")
	if code != ExitOK || !strings.Contains(out, "no service runs here now") || !strings.Contains(out, "/etc/stratum/pki/apiserver.crt") {
		t.Fatalf("certs renew with no supervisor: exit %d\n%s\n%s", code, out, errOut)
	}
}

// TestCertsRenewRefusedWithAMemberDown: on three control planes, cp3's etcd
// crashed, `certs renew` on cp2 exits 3 (its etcd's restart would leave one
// voter of three), naming the member down and what to do, with cp2's
// certificates as they were and its etcd not restarted.
// TestRenewCertsRefusedWithAMemberDown (ha) also renews there once cp2's own
// certificate has expired.
func TestCertsRenewRefusedWithAMemberDown(t *testing.T) {
	t.Parallel() // its own simulated cluster
	c := sim.Start(t, sim.Config{ControlPlanes: 3})
	cp2, cp3 := c.Host("cp2"), c.Host("cp3")
	d := cp2.Handle()
	crt := "/etc/stratum/pki/etcd/server.crt"
	before, err := d.ReadFile(crt)
	if err != nil {
		t.Fatal(err)
	}
	cp3.CrashEtcd()
	from := len(c.Events().Events())
	code, out, errOut := runCLI(t, on(cp2), "certs", "renew")
	if code != ExitRefused || !strings.Contains(errOut, ha.EtcdEndpoint(cp3.IP().String())) || !strings.Contains(errOut, "nothing was changed") || !strings.Contains(errOut, "stratum etcd member remove NAME") {
		t.Fatalf("certs renew on cp2 with cp3's etcd crashed: exit %d, want 3 naming cp3's member and what to do\n%s\n%s", code, out, errOut)
	}
	if after, _ := d.ReadFile(crt); !bytes.Equal(after, before) {
		t.Fatal("the refused renewal rewrote cp2's etcd server certificate")
	}
	for _, e := range c.Events().Events()[from:] {
		if e.Host == cp2.Name() && e.Kind == "service" {
			t.Fatalf("the refused renewal touched cp2's services: %s", e)
		}
	}
	if !cp2.EtcdRunning() {
		t.Fatal("cp2's etcd does not run after the refused renewal")
	}
}

// stopAnswerLost is a host whose service stops go through but answer an
// error, as a stop whose caller gave up does.
type stopAnswerLost struct{ *sim.Handle }

func (h stopAnswerLost) StopService(ctx context.Context, name string) error {
	if err := h.Handle.StopService(ctx, name); err != nil {
		return err
	}
	return errors.New("the answer to the stop of " + name + " was lost (the test)")
}
