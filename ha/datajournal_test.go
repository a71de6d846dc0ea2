package ha

import (
	"io/fs"
	"syscall"
	"testing"
)

// statFailsHost is a dirHost whose Stat of one path fails as a failing
// disk's would.
type statFailsHost struct {
	dirHost
	path string
}

func (h statFailsHost) Stat(p string) (fs.FileInfo, error) {
	if p == h.path {
		return nil, &fs.PathError{Op: "stat", Path: p, Err: syscall.EIO}
	}
	return h.dirHost.Stat(p)
}

// TestDataReplaceUnderWayWhenUnsure: the etcd data replacement journal is
// under way when it is there, and when it cannot be looked at (a restore
// or rejoin would otherwise remove an earlier run's journal after a failed
// stop); only a journal known absent is not.
func TestDataReplaceUnderWayWhenUnsure(t *testing.T) {
	n, d := newDirNode(t)
	if n.dataReplaceUnderWay() {
		t.Fatal("a node without the journal: under way, want not")
	}
	if err := d.WriteFile(dataReplacePath, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if !n.dataReplaceUnderWay() {
		t.Fatal("a node with the journal: not under way")
	}
	unsure := NewNode(Env{Host: statFailsHost{dirHost{d}, dataReplacePath}})
	if !unsure.dataReplaceUnderWay() {
		t.Fatal("a journal whose stat fails (EIO): not under way, want it taken as there")
	}
}
