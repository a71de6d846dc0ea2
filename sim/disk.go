package sim

import (
	"fmt"
	"path/filepath"
	"syscall"

	"stratum.dev/stratum/internal/host"
	"stratum.dev/stratum/internal/host/faultfs"
	"stratum.dev/stratum/internal/version"
)

// newHostFiles is a host's files: the production host.Dir over its root,
// with the disk fault layer (faultfs) between it and the real file system.
// The layer keeps what a crash that loses unsynced data would roll back in
// a trash directory beside the root, on the same file system.
func (c *Cluster) newHostFiles(name, root string) (*host.Dir, *faultfs.FS) {
	disk := faultfs.New(host.OS, faultfs.Config{
		Root:  root,
		Trash: filepath.Join(filepath.Dir(root), "."+filepath.Base(root)+".disk-trash"),
		OnFault: func(e *faultfs.Error) {
			c.events.Record(name, "fault", "disk: %s %s: %v", e.Op, e.Path, e.Errno)
		},
	})
	return &host.Dir{Root: root, LockDir: version.LockDir, FS: disk}, disk
}

// FailDisk arms disk faults on the host: every later file operation through
// its files (an operation's, through a Handle, and the simulator's own) is
// put to inj, usually a *faultfs.Rule, and fails with the errno it returns,
// as an error naming the operation and the path (errors.Is matches the
// errno and faultfs.ErrInjected). Each failure is recorded as a "fault"
// event. It replaces what was armed, and stays armed across crashes until
// DisarmDisk.
func (h *Host) FailDisk(inj faultfs.Injector) {
	what := "a custom injector"
	if s, ok := inj.(fmt.Stringer); ok {
		what = s.String()
	}
	h.cluster.events.Record(h.name, "action", "armed disk faults: %s", what)
	h.disk.Arm(inj)
}

// DisarmDisk lets every later file operation on the host through.
func (h *Host) DisarmDisk() {
	h.disk.Disarm()
	h.cluster.events.Record(h.name, "heal", "disk faults disarmed")
}

// UnsyncedFiles lists the paths inside the host that a crash losing
// unsynced data would change now: names created, renamed or removed in a
// directory not fsync'd since, and files with data not fsync'd. A writer
// that syncs as host.Dir does leaves none once its calls return.
func (h *Host) UnsyncedFiles() []string { return h.disk.Unsynced() }

// CrashLosingUnsynced crashes the host as Crash does, and its disk loses
// what was not made durable (lazyfs's model, kept by faultfs): each name
// whose directory was not fsync'd since it changed goes back to what it was
// (a rename is undone, a new file vanishes, a removed one comes back), and
// each file keeps only what its last fsync covered.
func (h *Host) CrashLosingUnsynced() {
	lost := h.disk.Unsynced()
	h.Crash()
	if err := h.disk.LoseUnsynced(); err != nil {
		h.cluster.events.Record(h.name, "error", "disk rollback failed: %v", err)
	}
	h.cluster.events.Record(h.name, "crash", "disk lost what was not fsync'd: %v", lost)
}

// CrashLosingUnsyncedAt is CrashAt with the crash losing unsynced data
// (Host.CrashLosingUnsynced).
func (c *Cluster) CrashLosingUnsyncedAt(hostName, checkpoint string) Armed {
	c.events.Record(hostName, "action", "armed crash losing unsynced data at checkpoint %s", checkpoint)
	return c.arm(hostName, checkpoint, &armed{action: actCrash, loseUnsynced: true})
}

// CrashAtDisk arms a crash at a disk operation: the operation that is r's
// failing match (its Errno is not used) freezes there for good, before it
// reaches the disk, and the host crashes losing unsynced data, as a power
// cut between two steps of a write. It replaces the disk faults armed and
// fires once; Reached is closed once the host has crashed. The goroutine
// frozen is whichever made the operation.
func (h *Host) CrashAtDisk(r *faultfs.Rule) Armed {
	a := &armed{action: actCrash, loseUnsynced: true, reached: make(chan struct{}), release: make(chan struct{})}
	h.cluster.events.Record(h.name, "action", "armed crash losing unsynced data at disk operation: %v", ruleWhere(r))
	h.disk.Arm(faultfs.InjectorFunc(func(op faultfs.Op, path string) syscall.Errno {
		if !r.Match(op, path) {
			return 0
		}
		h.disk.Disarm()
		h.cluster.events.Record(h.name, "fault", "disk: crash before %s %s", op, path)
		h.CrashLosingUnsynced()
		close(a.reached)
		<-frozen
		panic("unreachable")
	}))
	return Armed{a}
}

// ruleWhere is a rule's description without its errno.
func ruleWhere(r *faultfs.Rule) string {
	return fmt.Sprintf("%v ops under %q, match %d", r.Ops, r.Prefix, max(r.Nth, 1))
}
