package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"stratum.dev/stratum/internal/certbundle"
	"stratum.dev/stratum/internal/token"
)

// TestTokenListAndDelete against a real apiserver: list shows both kinds of
// token and never a secret; delete revokes a control-plane grant's token and
// drops its entry from the shared-certificate Secret; an unknown ID changes
// nothing, a malformed one is a usage error.
func TestTokenListAndDelete(t *testing.T) {
	_, cp1, opts := upOneControlPlane(t, 1)
	d := cp1.Handle()
	mint := func(args ...string) string {
		t.Helper()
		code, out, errOut := runCLI(t, opts, append([]string{"token", "create"}, args...)...)
		if code != ExitOK {
			t.Fatalf("token create %v: exit %d\n%s", args, code, errOut)
		}
		return mintedID(out)
	}
	cpID, workerID := mint("--control-plane"), mint()

	code, out, errOut := runCLI(t, opts, "token", "list", "-o", "json")
	if code != ExitOK {
		t.Fatalf("token list: exit %d\n%s", code, errOut)
	}
	var list []token.Info
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("token list -o json: %v\n%s", err, out)
	}
	kinds := map[string]string{}
	for _, i := range list {
		kinds[i.ID] = i.Kind
		if !i.Live || i.Expires == nil {
			t.Errorf("fresh token %s listed as not live or never expiring: %+v", i.ID, i)
		}
	}
	if kinds[cpID] != "control-plane" || kinds[workerID] != "worker" {
		t.Fatalf("token list kinds %v, want %s control-plane and %s worker", kinds, cpID, workerID)
	}
	if code, out, _ := runCLI(t, opts, "token", "list"); code != ExitOK || !strings.Contains(out, cpID) || strings.Contains(out, ".") && strings.Contains(out, cpID+".") {
		t.Fatalf("token list table: exit %d\n%s", code, out)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := adminClient(d)
	if err != nil {
		t.Fatal(err)
	}
	certs := func() (rv string, entries map[string]bool) {
		s, err := cs.CoreV1().Secrets("kube-system").Get(ctx, "stratum-certs", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		entries = map[string]bool{}
		for k := range s.Data {
			entries[k] = true
		}
		return s.ResourceVersion, entries
	}
	if _, e := certs(); !e[certbundle.GrantEntryPrefix+cpID] {
		t.Fatalf("the grant of %s has no entry in stratum-certs: %v", cpID, e)
	}

	rv, _ := certs()
	if code, _, errOut := runCLI(t, opts, "token", "delete", "zzzzzz"); code != ExitFail || !strings.Contains(errOut, "no such bootstrap token zzzzzz") {
		t.Fatalf("delete of an unknown token: exit %d\n%s", code, errOut)
	}
	if code, _, _ := runCLI(t, opts, "token", "delete", "Bad-ID"); code != ExitUsage {
		t.Fatalf("delete of a malformed ID: exit %d, want %d", code, ExitUsage)
	}
	if got, _ := certs(); got != rv {
		t.Fatalf("refused deletes changed stratum-certs (resourceVersion %s -> %s)", rv, got)
	}
	if n := len(list); n != 2 {
		t.Fatalf("listed %d tokens, want 2", n)
	}

	if code, out, errOut := runCLI(t, opts, "token", "delete", cpID); code != ExitOK || !strings.Contains(out, "deleted token "+cpID) {
		t.Fatalf("token delete %s: exit %d\n%s\n%s", cpID, code, out, errOut)
	}
	if _, err := cs.CoreV1().Secrets(token.Namespace).Get(ctx, token.SecretPrefix+cpID, metav1.GetOptions{}); err == nil {
		t.Fatalf("token %s still exists after delete", cpID)
	}
	if _, e := certs(); e[certbundle.GrantEntryPrefix+cpID] {
		t.Fatalf("the deleted token's grant entry is still in stratum-certs: %v", e)
	}
}
