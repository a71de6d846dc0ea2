package faultfs_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"pgregory.net/rapid"

	"stratum.dev/stratum/internal/host"
	"stratum.dev/stratum/internal/host/faultfs"
)

// layer is a production host.Dir over a fault layer over the real disk, as
// the simulator builds a host's files.
type layer struct {
	t      *testing.T
	dir    *host.Dir
	fs     *faultfs.FS
	faults []*faultfs.Error
}

func newLayer(t *testing.T) *layer {
	t.Helper()
	base := t.TempDir()
	root := filepath.Join(base, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	l := &layer{t: t}
	l.fs = faultfs.New(host.OS, faultfs.Config{
		Root: root, Trash: filepath.Join(base, "trash"),
		OnFault: func(e *faultfs.Error) { l.faults = append(l.faults, e) },
	})
	l.dir = &host.Dir{Root: root, FS: l.fs}
	return l
}

// content is a file's contents inside the host, "<absent>" when missing.
func (l *layer) content(p string) string {
	l.t.Helper()
	b, err := os.ReadFile(l.dir.Path(p))
	if errors.Is(err, fs.ErrNotExist) {
		return "<absent>"
	}
	if err != nil {
		l.t.Fatal(err)
	}
	return string(b)
}

func (l *layer) write(p, data string) {
	l.t.Helper()
	if err := l.dir.WriteFile(p, []byte(data), 0o600); err != nil {
		l.t.Fatalf("write %s: %v", p, err)
	}
}

// crash loses what was not made durable.
func (l *layer) crash() {
	l.t.Helper()
	if err := l.fs.LoseUnsynced(); err != nil {
		l.t.Fatalf("lose unsynced: %v", err)
	}
}

// temporaries lists the temporary files left under the host's root.
func (l *layer) temporaries() []string {
	l.t.Helper()
	var out []string
	filepath.WalkDir(l.dir.Root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.Contains(d.Name(), ".tmp-") {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// TestEachWriteStageFailsCleanly fails each stage of host.Dir's WriteFile in
// turn, with each errno: the error names the operation, the path and the
// errno; the file holds its old contents (or, when only the directory fsync
// failed, the new ones: the rename happened) and no temporary is left; a
// crash then brings back the old contents, since nothing of the failed write
// was durable; once disarmed, the write is durable.
func TestEachWriteStageFailsCleanly(t *testing.T) {
	for _, op := range []faultfs.Op{faultfs.OpMkdir, faultfs.OpCreate, faultfs.OpWrite, faultfs.OpSync, faultfs.OpRename, faultfs.OpSyncDir} {
		for _, errno := range []syscall.Errno{syscall.EIO, syscall.ENOSPC} {
			t.Run(string(op)+"/"+errno.Error(), func(t *testing.T) {
				l := newLayer(t)
				p, old := "/var/lib/stratum/node-state.json", "old"
				if op == faultfs.OpMkdir {
					p, old = "/etc/stratum/pki/ca.crt", "<absent>"
				} else {
					l.write(p, old)
				}
				r := &faultfs.Rule{Ops: []faultfs.Op{op}, Errno: errno}
				l.fs.Arm(r)
				err := l.dir.WriteFile(p, []byte("new contents"), 0o600)
				if !errors.Is(err, errno) || !errors.Is(err, faultfs.ErrInjected) {
					t.Fatalf("WriteFile = %v, want an injected %v", err, errno)
				}
				if len(l.faults) != 1 || r.Fired() != 1 {
					t.Fatalf("faults reported %v, fired %d; want one", l.faults, r.Fired())
				}
				if f := l.faults[0]; !strings.Contains(err.Error(), f.Error()) || !strings.Contains(err.Error(), p) ||
					!strings.Contains(f.Error(), string(op)+" /") || f.Op != op {
					t.Fatalf("error %q does not name the operation %s, its path and the file %s (fault %q)", err, op, p, f)
				}
				want := old
				if op == faultfs.OpSyncDir {
					want = "new contents"
				}
				if got := l.content(p); got != want {
					t.Fatalf("after a failed %s the file holds %q, want %q", op, got, want)
				}
				if tmp := l.temporaries(); len(tmp) > 0 {
					t.Fatalf("temporaries left: %v", tmp)
				}
				l.crash()
				if got := l.content(p); got != old {
					t.Fatalf("after a crash the file holds %q, want the durable %q", got, old)
				}
				if tmp := l.temporaries(); len(tmp) > 0 {
					t.Fatalf("temporaries left after the crash: %v", tmp)
				}
				l.fs.Disarm()
				l.write(p, "new contents")
				if u := l.fs.Unsynced(); len(u) > 0 {
					t.Fatalf("a completed write left %v unsynced", u)
				}
				l.crash()
				if got := l.content(p); got != "new contents" {
					t.Fatalf("a completed write lost by a crash: %q", got)
				}
			})
		}
	}
}

// TestRemovalsFailCleanly fails Remove's and RemoveAll's operations and
// their directory fsyncs: the error names them; a removal whose fsync
// failed is undone by a crash; a retried Remove of the missing file makes
// the removal durable.
func TestRemovalsFailCleanly(t *testing.T) {
	l := newLayer(t)
	l.write("/var/lib/stratum/join-intent.json", "journal")
	l.write("/etc/stratum/pki/etcd/ca.crt", "etcd ca")

	l.fs.Arm(&faultfs.Rule{Ops: []faultfs.Op{faultfs.OpRemove}, Errno: syscall.EIO})
	err := l.dir.Remove("/var/lib/stratum/join-intent.json")
	if !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), "remove /var/lib/stratum/join-intent.json") {
		t.Fatalf("Remove = %v", err)
	}
	if l.content("/var/lib/stratum/join-intent.json") != "journal" {
		t.Fatal("a failed remove removed the file")
	}
	l.fs.Arm(&faultfs.Rule{Ops: []faultfs.Op{faultfs.OpRemoveAll}, Errno: syscall.EIO})
	if err := l.dir.RemoveAll("/etc/stratum/pki/etcd"); !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), "remove-all /etc/stratum/pki/etcd") {
		t.Fatalf("RemoveAll = %v", err)
	}

	l.fs.Arm(&faultfs.Rule{Ops: []faultfs.Op{faultfs.OpSyncDir}, Sticky: true, Errno: syscall.ENOSPC})
	if err := l.dir.Remove("/var/lib/stratum/join-intent.json"); !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "fsync-dir /var/lib/stratum") {
		t.Fatalf("Remove with its fsync failing = %v", err)
	}
	if err := l.dir.RemoveAll("/etc/stratum/pki/etcd"); !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "fsync-dir /etc/stratum/pki") {
		t.Fatalf("RemoveAll with its fsync failing = %v", err)
	}
	if l.content("/var/lib/stratum/join-intent.json") != "<absent>" || l.content("/etc/stratum/pki/etcd/ca.crt") != "<absent>" {
		t.Fatal("the removals did not happen")
	}
	want := []string{"/etc/stratum/pki/etcd", "/var/lib/stratum/join-intent.json"}
	if u := l.fs.Unsynced(); !slices.Equal(u, want) {
		t.Fatalf("unsynced %v, want %v", u, want)
	}
	// Retried with the disk healthy: the file is missing, and the retry
	// still makes its removal durable.
	l.fs.Disarm()
	if err := l.dir.Remove("/var/lib/stratum/join-intent.json"); err != nil {
		t.Fatal(err)
	}
	l.crash()
	if got := l.content("/var/lib/stratum/join-intent.json"); got != "<absent>" {
		t.Fatalf("the retried removal was lost: %q", got)
	}
	if got := l.content("/etc/stratum/pki/etcd/ca.crt"); got != "etcd ca" {
		t.Fatalf("the tree whose removal was never fsync'd did not come back: %q", got)
	}

	// A removal of a file inside a tree whose own removal was not made
	// durable: the file's directory is gone, so the retry makes durable the
	// nearest directory that is there (rapid seed 15075763648537361726 of
	// TestDirWritesAreAtomicAndDurable brought such a file back).
	l.fs.Arm(&faultfs.Rule{Ops: []faultfs.Op{faultfs.OpSyncDir}, Errno: syscall.EIO})
	if err := l.dir.RemoveAll("/etc/stratum/pki/etcd"); !errors.Is(err, syscall.EIO) {
		t.Fatalf("RemoveAll with its fsync failing = %v", err)
	}
	l.fs.Disarm()
	if err := l.dir.Remove("/etc/stratum/pki/etcd/ca.crt"); err != nil {
		t.Fatal(err)
	}
	if u := l.fs.Unsynced(); len(u) > 0 {
		t.Fatalf("unsynced after removing a file of the removed tree: %v", u)
	}
	l.crash()
	if got := l.content("/etc/stratum/pki/etcd/ca.crt"); got != "<absent>" {
		t.Fatalf("a removal reported done came back after a crash: %q", got)
	}
}

// TestMkdirAllIsDurable: a directory Dir creates survives a crash once
// MkdirAll (or a write into it) returns; one whose parent fsync failed is
// removed again, so a retry creates and syncs it afresh.
func TestMkdirAllIsDurable(t *testing.T) {
	l := newLayer(t)
	if err := l.dir.MkdirAll("/var/lib/stratum/etcd", 0o700); err != nil {
		t.Fatal(err)
	}
	l.crash()
	if fi, err := l.dir.Stat("/var/lib/stratum/etcd"); err != nil || !fi.IsDir() {
		t.Fatalf("a directory MkdirAll made was lost by a crash: %v", err)
	}
	l.fs.Arm(&faultfs.Rule{Ops: []faultfs.Op{faultfs.OpSyncDir}, Prefix: "/etc", Errno: syscall.EIO})
	err := l.dir.MkdirAll("/etc/stratum", 0o700)
	if !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), "create directory /etc/stratum") {
		t.Fatalf("MkdirAll with its parent's fsync failing = %v", err)
	}
	if _, err := l.dir.Stat("/etc/stratum"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a directory whose parent fsync failed was kept: %v", err)
	}
	l.fs.Disarm()
	if err := l.dir.MkdirAll("/etc/stratum", 0o700); err != nil {
		t.Fatal(err)
	}
	if u := l.fs.Unsynced(); len(u) > 0 {
		t.Fatalf("unsynced after MkdirAll: %v", u)
	}
}

// TestUnsyncedDataIsLost is lazyfs's model at the host.FS level, as a
// writer that skips a step would leave it: a file renamed into place and its
// directory fsync'd, but never fsync'd itself, is empty after a crash; one
// fsync'd part-way keeps the fsync'd prefix; a rename whose directory was
// not fsync'd is undone.
func TestUnsyncedDataIsLost(t *testing.T) {
	l := newLayer(t)
	l.write("/etc/stratum/admin.conf", "old")
	dir := l.dir.Path("/etc/stratum")
	put := func(name string, parts []string, syncAfter int, syncDir bool) {
		t.Helper()
		f, err := l.fs.CreateTemp(dir, ".x.tmp-*")
		if err != nil {
			t.Fatal(err)
		}
		for i, p := range parts {
			if _, err := f.Write([]byte(p)); err != nil {
				t.Fatal(err)
			}
			if i+1 == syncAfter {
				if err := f.Sync(); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		if err := l.fs.Rename(f.Name(), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
		if syncDir {
			if err := l.fs.SyncDir(dir); err != nil {
				t.Fatal(err)
			}
		}
	}
	put("admin.conf", []string{"never fsync'd"}, 0, true)
	put("scheduler.conf", []string{"fsync'd, ", "then not"}, 1, true)
	put("bootstrap.conf", []string{"renamed, directory not fsync'd"}, 1, false)
	want := []string{"/etc/stratum/admin.conf", "/etc/stratum/bootstrap.conf", "/etc/stratum/scheduler.conf"}
	if u := l.fs.Unsynced(); !slices.Equal(u, want) {
		t.Fatalf("unsynced %v, want %v", u, want)
	}
	l.crash()
	for p, want := range map[string]string{
		"/etc/stratum/admin.conf":     "",
		"/etc/stratum/scheduler.conf": "fsync'd, ",
		"/etc/stratum/bootstrap.conf": "<absent>",
	} {
		if got := l.content(p); got != want {
			t.Errorf("%s after a crash: %q, want %q", p, got, want)
		}
	}
	if u := l.fs.Unsynced(); len(u) > 0 {
		t.Fatalf("unsynced after the crash: %v", u)
	}
}

// TestRenameOverUndone: a file renamed over a durable one, its directory not
// fsync'd, is undone by a crash, old contents back; so is a rename away from
// a durable name.
func TestRenameOverUndone(t *testing.T) {
	l := newLayer(t)
	l.write("/a/old", "A")
	l.write("/a/other", "B")
	dir := l.dir.Path("/a")
	if err := l.fs.Rename(filepath.Join(dir, "other"), filepath.Join(dir, "old")); err != nil {
		t.Fatal(err)
	}
	if l.content("/a/old") != "B" || l.content("/a/other") != "<absent>" {
		t.Fatal("rename did not happen")
	}
	l.crash()
	if l.content("/a/old") != "A" || l.content("/a/other") != "B" {
		t.Fatalf("after a crash: old %q other %q, want A and B", l.content("/a/old"), l.content("/a/other"))
	}
}

// TestNestedRollback: a durable tree holding an unsynced new name is
// removed, recreated (its parent not fsync'd) with a file written into it,
// and the host crashes: the tree comes back as it was durably, without the
// unsynced name or the new tree.
func TestNestedRollback(t *testing.T) {
	l := newLayer(t)
	l.write("/t/a", "a")
	l.write("/t/sub/b", "b")
	sub := l.dir.Path("/t/sub")
	f, err := l.fs.CreateTemp(sub, "c-*")
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("unsynced name"))
	f.Sync()
	f.Close()
	if err := l.fs.RemoveAll(l.dir.Path("/t")); err != nil {
		t.Fatal(err)
	}
	if err := l.fs.Mkdir(l.dir.Path("/t"), 0o700); err != nil {
		t.Fatal(err)
	}
	l.write("/t/new", "recreated")
	l.crash()
	var got []string
	filepath.WalkDir(l.dir.Path("/t"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			b, _ := os.ReadFile(p)
			got = append(got, strings.TrimPrefix(p, l.dir.Root)+"="+string(b))
		}
		return nil
	})
	if want := []string{"/t/a=a", "/t/sub/b=b"}; !slices.Equal(got, want) {
		t.Fatalf("after a crash /t holds %v, want %v", got, want)
	}
}

// TestPartialWrite: an injected write fault writes the first half of the
// buffer, as a disk filling up does, and WriteFile still leaves the old file.
func TestPartialWrite(t *testing.T) {
	l := newLayer(t)
	f, err := l.fs.CreateTemp(l.dir.Root, "x-*")
	if err != nil {
		t.Fatal(err)
	}
	l.fs.Arm(&faultfs.Rule{Ops: []faultfs.Op{faultfs.OpWrite}, Errno: syscall.ENOSPC})
	n, err := f.Write([]byte("abcdef"))
	f.Close()
	if n != 3 || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Write = %d, %v; want 3 and ENOSPC", n, err)
	}
	if b, _ := os.ReadFile(f.Name()); string(b) != "abc" {
		t.Fatalf("file holds %q, want the first half", b)
	}
}

// TestRuleMatches: kinds, prefix, the Nth match, one-shot or sticky.
func TestRuleMatches(t *testing.T) {
	ops := []struct {
		op   faultfs.Op
		path string
	}{
		{faultfs.OpWrite, "/etc/stratum/pki/ca.crt"},
		{faultfs.OpSync, "/etc/stratum/pki/ca.crt"},
		{faultfs.OpWrite, "/var/lib/stratum/node-state.json"},
		{faultfs.OpWrite, "/etc/stratum/pki/ca.key"},
		{faultfs.OpWrite, "/etc/stratum/pki/sa.key"},
	}
	for _, c := range []struct {
		rule *faultfs.Rule
		want []bool
	}{
		{&faultfs.Rule{}, []bool{true, false, false, false, false}},
		{&faultfs.Rule{Nth: 3}, []bool{false, false, true, false, false}},
		{&faultfs.Rule{Ops: []faultfs.Op{faultfs.OpWrite}, Prefix: "/etc/stratum/pki/", Nth: 2}, []bool{false, false, false, true, false}},
		{&faultfs.Rule{Ops: []faultfs.Op{faultfs.OpWrite}, Prefix: "/etc/stratum/pki/", Nth: 2, Sticky: true}, []bool{false, false, false, true, true}},
		{&faultfs.Rule{Prefix: "/var/", Sticky: true}, []bool{false, false, true, false, false}},
	} {
		r := c.rule
		r.Errno = syscall.EIO
		var got []bool
		for _, o := range ops {
			got = append(got, r.MaybeFail(o.op, o.path) == syscall.EIO)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%v: fails %v, want %v", r, got, c.want)
		}
	}
}

// chunked hands its reader's bytes over in pieces, with no WriterTo, so
// io.Copy makes several writes and a fault can land between them.
type chunked struct{ r *strings.Reader }

func (c chunked) Read(p []byte) (int, error) { return c.r.Read(p[:min(len(p), 4096)]) }

// TestDirWritesAreAtomicAndDurable is a property of host.Dir over the
// layer: a random sequence of writes and removals on the files that matter
// (the PKI, the kubeconfigs, the node state, the intent journal), each
// drawn to fail at a drawn operation with a drawn errno, and crashes losing
// what was not fsync'd. A failed call fails with the injected error; every
// file then holds, before and after any crash, what the last successful
// call on it left or what a failed call since tried to write, never a mix,
// a prefix or nothing in its place; a successful call survives a crash; no
// temporary file is left.
func TestDirWritesAreAtomicAndDurable(t *testing.T) {
	paths := []string{
		"/etc/stratum/pki/ca.crt", "/etc/stratum/pki/etcd/ca.key", "/etc/stratum/admin.conf",
		"/var/lib/stratum/node-state.json", "/var/lib/stratum/join-intent.json",
	}
	trees := []string{"/etc/stratum/pki/etcd", "/etc/stratum/pki", "/var/lib/stratum"}
	const absent = "<absent>"
	rapid.Check(t, func(rt *rapid.T) {
		l := newLayer(t)
		// acked is each file's contents as the last successful call left
		// them; maybe what failed calls since may have left instead.
		acked := map[string]string{}
		maybe := map[string][]string{}
		allowed := func(p string) []string {
			a, ok := acked[p]
			if !ok {
				a = absent
			}
			return append([]string{a}, maybe[p]...)
		}
		check := func(when string) {
			for _, p := range paths {
				if got := l.content(p); !slices.Contains(allowed(p), got) {
					what := fmt.Sprintf("holds %.40q (%d bytes)", got, len(got))
					if got == absent {
						what = "is absent"
					}
					rt.Fatalf("%s: %s %s, want one of %.40q", when, p, what, allowed(p))
				}
			}
			if tmp := l.temporaries(); len(tmp) > 0 {
				rt.Fatalf("%s: temporaries left: %v", when, tmp)
			}
		}
		// settle makes what is on disk the model: a crash has decided.
		settle := func() {
			for _, p := range paths {
				if got := l.content(p); got == absent {
					delete(acked, p)
				} else {
					acked[p] = got
				}
			}
			clear(maybe)
		}
		for step := range rapid.IntRange(1, 25).Draw(rt, "steps") {
			if rapid.IntRange(0, 5).Draw(rt, "crash") == 0 {
				l.crash()
				check("after a crash")
				settle()
				continue
			}
			var rule *faultfs.Rule
			if rapid.Bool().Draw(rt, "fault") {
				rule = &faultfs.Rule{
					Ops:   []faultfs.Op{rapid.SampledFrom(faultfs.Ops).Draw(rt, "op")},
					Nth:   rapid.IntRange(1, 4).Draw(rt, "nth"),
					Errno: rapid.SampledFrom([]syscall.Errno{syscall.EIO, syscall.ENOSPC}).Draw(rt, "errno"),
				}
				l.fs.Arm(rule)
			}
			var err error
			var touched []string
			var after string
			switch rapid.IntRange(0, 3).Draw(rt, "action") {
			case 0, 1:
				p := rapid.SampledFrom(paths).Draw(rt, "path")
				size := rapid.IntRange(0, 20000).Draw(rt, "size")
				after = fmt.Sprintf("v%d:%s", step, strings.Repeat("x", size))
				err = l.dir.WriteFrom(p, chunked{strings.NewReader(after)}, 0o600)
				touched = []string{p}
			case 2:
				p := rapid.SampledFrom(paths).Draw(rt, "path")
				err = l.dir.Remove(p)
				touched, after = []string{p}, absent
			case 3:
				tree := rapid.SampledFrom(trees).Draw(rt, "tree")
				err = l.dir.RemoveAll(tree)
				for _, p := range paths {
					if strings.HasPrefix(p, tree+"/") {
						touched = append(touched, p)
					}
				}
				after = absent
			}
			l.fs.Disarm()
			for _, p := range touched {
				if err == nil {
					if after == absent {
						delete(acked, p)
					} else {
						acked[p] = after
					}
					delete(maybe, p)
				} else {
					maybe[p] = append(maybe[p], after)
				}
			}
			if err != nil && (rule == nil || rule.Fired() == 0 || !errors.Is(err, faultfs.ErrInjected)) {
				rt.Fatalf("a call failed without an injected fault (rule %v): %v", rule, err)
			}
			if rule != nil && rule.Fired() > 0 && err == nil {
				rt.Fatalf("a fault fired (%v) and the call succeeded", rule)
			}
			check(fmt.Sprintf("step %d (err %v)", step, err))
		}
		l.crash()
		check("after the last crash")
	})
}
