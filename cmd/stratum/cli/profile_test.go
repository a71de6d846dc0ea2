package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"stratum.dev/stratum/internal/controlplane"
	"stratum.dev/stratum/sim"
)

// TestCISProfileAuditsTheAPIServer: `stratum up --profile cis` runs an
// apiserver that audits by the policy the node assembly wrote. A Secret
// created with the admin credentials shows in the audit log the apiserver
// itself wrote, at Metadata level (its name, never its data), and the
// health probes do not (the policy leaves them out). A policy the
// apiserver rejects, or flags it never got, fail here: the profile once
// wrote its policy and no apiserver read it.
func TestCISProfileAuditsTheAPIServer(t *testing.T) {
	t.Parallel() // its own simulated cluster or host
	c := sim.Start(t, sim.Config{Fresh: true, SpareHosts: 1, APIServers: true})
	cp1 := c.Hosts()[0]
	if code, out, errOut := runCLI(t, on(cp1), "up", "--profile", "cis"); code != ExitOK {
		t.Fatalf("up --profile cis: exit %d\n%s\n%s", code, out, errOut)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg, err := cp1.AdminConfig()
	if err != nil {
		t.Fatal(err)
	}
	readyz(ctx, t, "cp1's apiserver", cfg)
	cs, err := cp1.Admin()
	if err != nil {
		t.Fatal(err)
	}
	const value = "audited-secret-value"
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "audited", Namespace: "default"}, StringData: map[string]string{"k": value}}
	if _, err := cs.CoreV1().Secrets("default").Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	logPath := cp1.Path(controlplane.AuditLogPath)
	var events []auditEvent
	var raw []byte
	for {
		raw, _ = os.ReadFile(logPath)
		events = auditEvents(t, raw)
		if auditedCreate(events, "secrets", "audited") != nil || ctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	ev := auditedCreate(events, "secrets", "audited")
	if ev == nil {
		t.Fatalf("the audit log %s (%d events) has no create of Secret default/audited", logPath, len(events))
	}
	if ev.Level != "Metadata" {
		t.Errorf("the Secret's create is audited at level %s, want Metadata", ev.Level)
	}
	for _, leak := range []string{value, base64.StdEncoding.EncodeToString([]byte(value))} {
		if bytes.Contains(raw, []byte(leak)) {
			t.Errorf("the audit log holds the Secret's data (%q)", leak)
		}
	}
	for _, e := range events {
		if strings.HasPrefix(e.RequestURI, "/readyz") || strings.HasPrefix(e.RequestURI, "/healthz") || strings.HasPrefix(e.RequestURI, "/livez") {
			t.Fatalf("the audit log records a health probe (%s), which the policy leaves out", e.RequestURI)
		}
	}
}

// auditEvent is what the test reads of one audit.k8s.io/v1 Event.
type auditEvent struct {
	Level      string `json:"level"`
	Stage      string `json:"stage"`
	Verb       string `json:"verb"`
	RequestURI string `json:"requestURI"`
	ObjectRef  *struct {
		Resource string `json:"resource"`
		Name     string `json:"name"`
	} `json:"objectRef"`
}

// auditEvents parses an audit log: one JSON event a line.
func auditEvents(t *testing.T, raw []byte) []auditEvent {
	t.Helper()
	var out []auditEvent
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var e auditEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			continue // a line the apiserver is still writing
		}
		out = append(out, e)
	}
	return out
}

// auditedCreate is the completed create of resource name among events.
func auditedCreate(events []auditEvent, resource, name string) *auditEvent {
	for i, e := range events {
		if e.Verb == "create" && e.Stage == "ResponseComplete" && e.ObjectRef != nil && e.ObjectRef.Resource == resource && e.ObjectRef.Name == name {
			return &events[i]
		}
	}
	return nil
}
