package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/host"
	"stratum.dev/stratum/internal/version"
	"stratum.dev/stratum/sim"
)

func TestPlanRemoval(t *testing.T) {
	row := func(name string, learner bool, health string) memberRow {
		return memberRow{Name: name, PeerURL: "https://" + name + ":2380", Learner: learner, Health: health}
	}
	three := []memberRow{row("cp1", false, "healthy"), row("cp2", false, "healthy"), row("cp3", false, "healthy")}
	oneDown := []memberRow{row("cp1", false, "healthy"), row("cp2", false, "unhealthy: down"), row("cp3", false, "healthy")}
	for _, tc := range []struct {
		name      string
		rows      []memberRow
		target    string
		wantErr   string
		wantRisks []string
	}{
		{"healthy voter", three, "cp3", "", []string{"cp3 is healthy and serving"}},
		{"by peer URL", three, "https://cp3:2380", "", []string{"cp3 is healthy and serving"}},
		{"unknown", three, "cp9", "no etcd member named", nil},
		{"would lose quorum", oneDown, "cp3", "", []string{"under the quorum of 2", "cp3 is healthy and serving"}},
		{"the dead one is fine", oneDown, "cp2", "", nil},
		{"own member", three, "cp1", "", []string{"this node's own member"}},
		{"learner", append(three[:2:2], row("cp3", true, "healthy")), "cp3", "", nil},
		{"last voter", []memberRow{row("cp1", false, "healthy")}, "cp1", "last voter", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := planRemoval(tc.rows, tc.target, "https://cp1:2380")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("planRemoval = %v, want an error with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Risks) != len(tc.wantRisks) {
				t.Fatalf("risks %q, want %q", p.Risks, tc.wantRisks)
			}
			for i, r := range tc.wantRisks {
				if !strings.Contains(p.Risks[i], r) {
					t.Fatalf("risk %q, want %q", p.Risks[i], r)
				}
			}
		})
	}
}

// TestEtcdMemberRemove against real etcd members: a dry run and refusals
// (an unknown member, quorum at risk, a healthy serving member, this node's
// own member) leave the member list as it was; a forced removal of a
// healthy third member goes through. (The removal of a gone member without
// --force is TestReplacingAControlPlanesMachine's.)
func TestEtcdMemberRemove(t *testing.T) {
	t.Parallel() // its own simulated cluster or host
	c := sim.Start(t, sim.Config{ControlPlanes: 3})
	d := c.Host("cp1").Handle()
	opts := Options{Host: func() (host.Host, error) { return d, nil }}
	members := func() string {
		t.Helper()
		code, out, errOut := runCLI(t, opts, "etcd", "members")
		if code != ExitOK {
			t.Fatalf("etcd members: exit %d\n%s", code, errOut)
		}
		var names []string
		for _, l := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
			names = append(names, strings.Fields(l)[0])
		}
		return strings.Join(names, " ")
	}
	if got := members(); got != "cp1 cp2 cp3" {
		t.Fatalf("members at the start: %s", got)
	}
	var rows []memberRow
	if code, out, errOut := runCLI(t, opts, "etcd", "members", "-o", "json"); code != ExitOK || json.Unmarshal([]byte(out), &rows) != nil || len(rows) != 3 {
		t.Fatalf("etcd members -o json: exit %d\n%s%s", code, out, errOut)
	}
	leaders := 0
	for _, r := range rows {
		if r.Leader {
			leaders++
		}
		if r.Health != "healthy" || r.Learner || r.ClientIP == "" || !strings.HasPrefix(r.PeerURL, "https://") || r.Version != version.Etcd {
			t.Fatalf("etcd members -o json row %+v", r)
		}
	}
	if leaders != 1 {
		t.Fatalf("etcd members -o json: %d leaders", leaders)
	}
	health := func(wantCode int, wantHealthy bool) {
		t.Helper()
		var rep struct {
			Healthy bool     `json:"healthy"`
			Members []string `json:"members"`
			Error   string   `json:"error"`
		}
		code, out, errOut := runCLI(t, opts, "etcd", "health", "-o", "json")
		if code != wantCode || json.Unmarshal([]byte(out), &rep) != nil || rep.Healthy != wantHealthy || len(rep.Members) != 3 || (rep.Error == "") != wantHealthy {
			t.Fatalf("etcd health -o json: exit %d, want %d\n%s%s", code, wantCode, out, errOut)
		}
	}
	health(ExitOK, true)
	for _, tc := range []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"cp9"}, ExitRefused, []string{"no etcd member named"}},
		// A healthy, serving member (a typo for the one that is gone) is
		// refused, naming it and the clean way to retire it.
		{[]string{"cp2"}, ExitRefused, []string{"cp2 is healthy and serving", "nothing was removed", "run `stratum reset` on it", "--force"}},
		{[]string{"cp3", "--dry-run"}, ExitRefused, []string{"would remove etcd member cp3", "refused without --force: cp3 is healthy and serving"}},
		{[]string{"cp3", "--dry-run", "--force"}, ExitOK, []string{"would remove etcd member cp3"}},
		{[]string{"cp1"}, ExitRefused, []string{"this node's own member"}},
		{[]string{"cp1", "--dry-run"}, ExitRefused, []string{"refused without --force: it is this node's own member"}},
	} {
		code, out, errOut := runCLI(t, opts, append([]string{"etcd", "member", "remove"}, tc.args...)...)
		if code != tc.code {
			t.Fatalf("member remove %v: exit %d, want %d\n%s%s", tc.args, code, tc.code, out, errOut)
		}
		for _, w := range tc.want {
			if !strings.Contains(out+errOut, w) {
				t.Fatalf("member remove %v lacks %q:\n%s%s", tc.args, w, out, errOut)
			}
		}
		if got := members(); got != "cp1 cp2 cp3" {
			t.Fatalf("member remove %v changed the members: %s", tc.args, got)
		}
	}
	c.Host("cp2").StopEtcd()
	health(ExitFail, false)
	code, _, errOut := runCLI(t, opts, "etcd", "member", "remove", "cp3")
	if code != ExitRefused || !strings.Contains(errOut, "under the quorum") {
		t.Fatalf("member remove cp3 with cp2 down: exit %d\n%s", code, errOut)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.Host("cp2").StartEtcd(ctx); err != nil {
		t.Fatal(err)
	}
	if got := members(); got != "cp1 cp2 cp3" {
		t.Fatalf("the refused removal changed the members: %s", got)
	}
	// etcd downgrade: a malformed target is bad usage; one etcd does not
	// validate (an upgrade) is refused with the storage as it was.
	if code, _, _ := runCLI(t, opts, "etcd", "downgrade", "three.six"); code != ExitUsage {
		t.Fatalf("etcd downgrade three.six: exit %d, want %d", code, ExitUsage)
	}
	n := ha.NewNode(ha.Env{Host: d})
	before, err := n.EtcdStorageAt(ctx, c.Host("cp1").IP().String())
	if err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runCLI(t, opts, "etcd", "downgrade", "3.8"); code != ExitRefused || !strings.Contains(errOut, "nothing was changed") {
		t.Fatalf("etcd downgrade 3.8: exit %d\n%s", code, errOut)
	}
	if after, err := n.EtcdStorageAt(ctx, c.Host("cp1").IP().String()); err != nil || after.Downgrading || after.StorageVersion != before.StorageVersion {
		t.Fatalf("a refused downgrade changed the storage: %+v -> %+v (%v)", before, after, err)
	}

	// cp3 healthy and serving: --force removes it all the same.
	if code, out, errOut := runCLI(t, opts, "etcd", "member", "remove", "cp3", "--force"); code != ExitOK || !strings.Contains(out, "removed: etcd member cp3") {
		t.Fatalf("member remove cp3 --force: exit %d\n%s%s", code, out, errOut)
	}
	if got := members(); got != "cp1 cp2" {
		t.Fatalf("members after removing cp3: %s", got)
	}

	// With this node's own member down the verdict is still a document: a
	// script reading `-o json` gets healthy false and why, and exit 1.
	c.Host("cp1").StopEtcd()
	code, out, errOut := runCLI(t, opts, "etcd", "health", "-o", "json")
	var down struct {
		Healthy *bool    `json:"healthy"`
		Members []string `json:"members"`
		Error   string   `json:"error"`
	}
	if code != ExitFail || json.Unmarshal([]byte(out), &down) != nil || down.Healthy == nil || *down.Healthy || down.Error == "" {
		t.Fatalf("etcd health -o json with cp1's etcd down: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	// The members unread through this node's own member: refused, exit 3,
	// nothing removed (it was exit 1, which says something may have been).
	if code, _, errOut := runCLI(t, opts, "etcd", "member", "remove", "cp2"); code != ExitRefused || !strings.Contains(errOut, "nothing was removed") {
		t.Fatalf("member remove cp2 with this node's etcd down: exit %d, want %d\n%s", code, ExitRefused, errOut)
	}
}
