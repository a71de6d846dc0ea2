package ha_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"stratum.dev/stratum/internal/syncbuf"
	"stratum.dev/stratum/internal/version"
	"stratum.dev/stratum/sim"
)

// TestSnapshotRestoreNeverMovesTheRevisionBack: a snapshot restored twice
// (or an older one restored after a newer) must start its revisions past
// everything the cluster it replaces wrote since: a watcher that resumes at
// the last revision it saw would otherwise miss, or misread, the events that
// reuse those numbers. The restore asks the old cluster's members for its
// revision and says what it found; with none answering it can only go past
// the snapshot's, and says that too.
func TestSnapshotRestoreNeverMovesTheRevisionBack(t *testing.T) {
	t.Parallel() // its own simulated cluster
	c := sim.Start(t, sim.Config{ControlPlanes: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp1 := c.Host("cp1")
	n := joinNodeOn(cp1)
	putMany(t, ctx, cp1, "before", 50)
	// The save goes where the operator asked, in a directory others may
	// write: a link planted at the name clientv3 writes through (dbPath.part)
	// is not followed, and the snapshot is a file of root's alone.
	dir := t.TempDir()
	snap := filepath.Join(dir, "etcd.db")
	victim := filepath.Join(dir, "not-the-snapshot")
	if err := os.WriteFile(victim, []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, snap+".part"); err != nil {
		t.Fatal(err)
	}
	// A save killed before its cleanup left its private directory, a part
	// of every Secret in it: the next save into the directory sweeps it.
	abandoned := filepath.Join(dir, ".stratum-snapshot-killed")
	if err := os.MkdirAll(abandoned, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{"snapshot.db.part": "half a dump", ".stratum-scratch": ""} {
		if err := os.WriteFile(filepath.Join(abandoned, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	long := time.Now().Add(-time.Hour)
	if err := os.Chtimes(abandoned, long, long); err != nil {
		t.Fatal(err)
	}
	ss, err := n.SnapshotSave(ctx, snap)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "kept" {
		t.Fatalf("the save wrote through the link at %s.part (%d bytes there now)", snap, len(b))
	}
	if fi, err := os.Lstat(snap); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the saved snapshot %s: %v (%v), want a regular file of mode 0600", snap, fi.Mode(), err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".stratum-snapshot-*")); len(left) > 0 {
		t.Fatalf("the save left its private directory, or an abandoned one: %v", left)
	}
	restore := func() string {
		t.Helper()
		var out syncbuf.Buffer
		if err := reportingNodeOn(cp1, &out).SnapshotRestore(ctx, &out, snap); err != nil {
			t.Fatalf("restore: %v\n%s", err, out.String())
		}
		return out.String()
	}
	// Written since the snapshot, as a busy cluster would.
	putMany(t, ctx, cp1, "since", 200)
	for round := range 2 {
		before := revision(t, ctx, cp1)
		out := restore()
		after := revision(t, ctx, cp1)
		if after <= before {
			t.Fatalf("restore %d of the snapshot (revision %d): the revision went from %d back to %d\n%s", round+1, ss.Revision, before, after, out)
		}
		m := regexp.MustCompile(`the old cluster is at revision (\d+)`).FindStringSubmatch(out)
		if said, _ := strconv.ParseInt(m[min(1, len(m)-1)], 10, 64); len(m) < 2 || said < before {
			t.Errorf("restore %d did not say the old cluster is at revision %d or later:\n%s", round+1, before, out)
		}
		putMany(t, ctx, cp1, fmt.Sprint("restored-", round), 200)
	}

	// No member answers (the disaster a restore is for): the restore reads
	// this node's own etcd data offline and goes past its revision, which is
	// a restore's 1e9 past the snapshot's and more, and says so.
	before := revision(t, ctx, cp1)
	cp1.StopEtcd()
	out := restore()
	if !strings.Contains(out, "no member of the old cluster answered; this node's own etcd data, read offline, is at revision") {
		t.Fatalf("a restore with its etcd down did not say it read the node's own data offline:\n%s", out)
	}
	if after := revision(t, ctx, cp1); after <= before {
		t.Fatalf("a restore with no member answering: the revision went from %d back to %d\n%s", before, after, out)
	}

	// A node without etcd data (a new machine restoring the backup): past
	// the snapshot's revision, saying why no further.
	cp1.StopEtcd()
	if err := cp1.Handle().RemoveAll(version.EtcdDataDir); err != nil {
		t.Fatal(err)
	}
	out = restore()
	if !strings.Contains(out, "no member of the old cluster answered, and this node holds no etcd data of it") {
		t.Fatalf("a restore on a node without etcd data did not say so:\n%s", out)
	}
	if after := revision(t, ctx, cp1); after <= ss.Revision {
		t.Fatalf("a restore on a node without etcd data starts at revision %d, not past the snapshot's %d", after, ss.Revision)
	}
}

// putMany writes n keys named prefix-i through h's own etcd member.
func putMany(t *testing.T, ctx context.Context, h *sim.Host, prefix string, n int) {
	t.Helper()
	cli, err := h.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	for i := range n {
		if _, err := cli.Put(ctx, fmt.Sprint(prefix, "-", i), "x"); err != nil {
			t.Fatalf("put through %s: %v", h.Name(), err)
		}
	}
}

// revision is the current revision of h's own etcd member.
func revision(t *testing.T, ctx context.Context, h *sim.Host) int64 {
	t.Helper()
	cli, err := h.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	resp, err := cli.Get(ctx, "revision-probe")
	if err != nil {
		t.Fatalf("read through %s: %v", h.Name(), err)
	}
	return resp.Header.Revision
}
