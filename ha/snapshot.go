package ha

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
	clientv3 "go.etcd.io/etcd/client/v3"
	clientsnapshot "go.etcd.io/etcd/client/v3/snapshot"
	utlsnapshot "go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.etcd.io/etcd/server/v3/storage/backend"
	"go.etcd.io/etcd/server/v3/storage/datadir"
	"go.etcd.io/etcd/server/v3/storage/mvcc"
	"go.etcd.io/etcd/server/v3/storage/schema"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"stratum.dev/stratum/internal/host"
	"stratum.dev/stratum/internal/nodelock"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/version"
)

// restoreClusterToken is a fresh --initial-cluster-token for one restore.
// etcd derives the member and cluster IDs of a restored data directory from
// the token and the peer URLs alone, so restoring the same snapshot on the
// same node twice with one token makes two clusters with the same cluster
// ID: members of the first would pass for members of the second. A unique
// token per restore makes every restored cluster distinct, as etcd's restore
// documentation advises. The token is used only by the restore: a member
// with data ignores its --initial-cluster-token, and members added later get
// their IDs from the member add.
func restoreClusterToken() (string, error) {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return "stratum-restore-" + hex.EncodeToString(b), nil
}

// restoreRevisionBump is how far a restore moves the restored keyspace's
// revision past the highest revision it knows the old cluster reached (when
// no member of it answers, this node's own data's, read offline; the
// snapshot's when that cannot be read either), and the restore marks the old
// revisions compacted: a kube-apiserver (or any watcher) that saw revisions
// written after the snapshot must never see the revision go backwards, which
// would leave its watch caches silently stale (etcd's documented restore
// advice for Kubernetes). Past the snapshot's revision alone is not enough:
// an older snapshot restored after a restore, or the same one restored
// twice, moved the revision back by everything written since the first.
const restoreRevisionBump = 1_000_000_000

// Checkpoints of a snapshot restore (SnapshotRestore), in order. From the
// first to the node state's save the etcd data replacement journal makes
// `stratum up` refuse (ErrEtcdDataReplacing); a re-run of the restore
// finishes it.
const (
	// CheckpointRestoreAfterStop: the local control plane is stopped; the
	// old data is untouched.
	CheckpointRestoreAfterStop = "restore-after-stop"
	// CheckpointRestoreAfterData: the restored data has replaced the old;
	// the node state still names the old membership.
	CheckpointRestoreAfterData = "restore-after-data"
)

// RestoreCheckpoints are a restore's checkpoints in order.
var RestoreCheckpoints = []string{CheckpointRestoreAfterStop, CheckpointRestoreAfterData}

// SnapshotStatus describes a snapshot file, as etcdutl reads it.
type SnapshotStatus struct {
	Hash      uint32
	Revision  int64
	TotalKeys int
	TotalSize int64
	Version   string
}

// SnapshotSave saves a snapshot of this node's etcd member (its client URL
// from the node state) to dbPath, a path on the machine running the command
// (not under the host's root), through clientv3's snapshot package: the
// member streams its backend into a directory made afresh beside dbPath
// (mode 0700, a name no one could guess), the presence of its checksum is
// checked (the restore verifies it), the file is read back with etcdutl's status, and only then renamed onto
// dbPath, mode 0600. clientv3 writes dbPath.part itself, opened without
// O_EXCL or O_NOFOLLOW: in a directory other users can write (/tmp) a
// .part file or link they placed there would be written through, as root,
// and kept their owner and mode — a readable dump of every Secret. In the
// private directory nothing but this save is there, and the save reaches it
// through its open descriptor (openOwnPrivateDir), so a directory renamed
// away and replaced by a link in a parent that is not sticky is not
// written through either.
func (n *Node) SnapshotSave(ctx context.Context, dbPath string) (SnapshotStatus, error) {
	st, err := nodestate.Load(n.env.Host)
	if err != nil {
		return SnapshotStatus{}, fmt.Errorf("snapshot save: %w", err)
	}
	if st.Etcd.ClientURL == "" {
		return SnapshotStatus{}, fmt.Errorf("snapshot save: node state %s records no etcd client URL; nothing was saved: run it on a control plane", nodestate.Path)
	}
	cfg, err := n.etcdConfig(st.Etcd.ClientURL)
	if err != nil {
		return SnapshotStatus{}, err
	}
	private, cleanup, err := newScratch(filepath.Dir(dbPath), snapshotScratchPrefix, snapshotScratchPrefix)
	if err != nil {
		return SnapshotStatus{}, fmt.Errorf("snapshot save: %w; nothing was saved: save to a directory this user can write", err)
	}
	defer cleanup()
	own, err := openOwnPrivateDir(private)
	if err != nil {
		return SnapshotStatus{}, fmt.Errorf("snapshot save: %w; nothing was saved", err)
	}
	defer own.Close()
	if hook := snapshotPrivateDirOpened.Load(); hook != nil {
		(*hook)(private)
	}
	saved := filepath.Join(fdPath(own), "snapshot.db")
	if _, err := clientsnapshot.SaveWithVersion(ctx, zap.NewNop(), cfg, saved); err != nil {
		return SnapshotStatus{}, fmt.Errorf("snapshot save from %s to %s: %w; nothing was saved", st.Etcd.ClientURL, dbPath, err)
	}
	ss, err := snapshotStatus(saved)
	if err != nil {
		return SnapshotStatus{}, fmt.Errorf("snapshot save from %s: the saved file does not read back: %w; nothing was saved to %s", st.Etcd.ClientURL, err, dbPath)
	}
	if err := os.Rename(saved, dbPath); err != nil {
		return SnapshotStatus{}, fmt.Errorf("snapshot save: %w; nothing was saved to %s", err, dbPath)
	}
	if err := syncDir(filepath.Dir(dbPath)); err != nil {
		return SnapshotStatus{}, fmt.Errorf("snapshot saved to %s, but %w: %w; a crash now may lose it: save it again", dbPath, ErrSnapshotUnsynced, err)
	}
	n.log.Info("etcd snapshot saved", "path", dbPath, "revision", ss.Revision, "keys", ss.TotalKeys)
	return ss, nil
}

// ErrSnapshotUnsynced matches a snapshot save that wrote its file but could
// not sync its directory: the file is there (holding every Secret of the
// cluster), and a crash may lose it.
var ErrSnapshotUnsynced = errors.New("its directory was not synced")

// snapshotPrivateDirOpened, when set (by tests), is called with a snapshot
// save's private directory once it is opened, before anything is written in
// it: where another user could swap the directory for a link.
var snapshotPrivateDirOpened atomic.Pointer[func(dir string)]

// openOwnPrivateDir opens dir, which this process has just made, refusing
// anything but a directory of its own that no one else may write (made 0700;
// a file system that keeps no modes, vfat, shows 0755): in a parent others
// may write (not sticky), another user can rename the directory away and put
// a link or a directory of theirs under its name, through which a save by
// name would write every Secret into a file they own. Every later access
// goes through the open directory (fdPath), never by its name.
func openOwnPrivateDir(dir string) (*os.File, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open the private directory %s: %w (replaced by another user?)", dir, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("stat the private directory %s: %w", dir, err)
	}
	if int(st.Uid) != os.Geteuid() || st.Mode&0o022 != 0 {
		unix.Close(fd)
		return nil, fmt.Errorf("the private directory %s is owned by uid %d with mode %o, not this process's own and writable by it alone (replaced by another user, or a file system that keeps no owners or modes, such as vfat or sshfs: save to a local directory and copy the file)", dir, st.Uid, st.Mode&0o777)
	}
	return os.NewFile(uintptr(fd), dir), nil
}

// fdPath names the open directory d itself: a path through it resolves in
// the directory d was opened on, whatever its name now holds.
func fdPath(d *os.File) string { return fmt.Sprintf("/proc/self/fd/%d", d.Fd()) }

// syncDir makes a rename or removal in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// snapshotStatus is etcdutl's status of the snapshot file at dbPath.
func snapshotStatus(dbPath string) (SnapshotStatus, error) {
	s, err := utlsnapshot.NewV3(zap.NewNop()).Status(dbPath)
	if err != nil {
		return SnapshotStatus{}, err
	}
	return SnapshotStatus{Hash: s.Hash, Revision: s.Revision, TotalKeys: s.TotalKey, TotalSize: s.TotalSize, Version: s.Version}, nil
}

// SnapshotRestore resets this control plane to a NEW single-member etcd
// cluster holding the data of the snapshot at dbPath (a path on the machine
// running the command): the seed the other control planes then rejoin
// (RejoinEtcd). It takes the maintenance and etcd-data locks, restores the
// snapshot into a scratch directory with etcd's own restore (etcdutl,
// verifying the snapshot's hash) before it touches anything, then stops the
// local control plane (kube-vip, kube-apiserver, etcd), replaces
// version.EtcdDataDir with the restored data, rewrites the node state's etcd
// membership to this member alone (initial-cluster-state "new", which is
// correct on a restored data directory: etcd finds the restored WAL and
// starts from it), starts the control plane again and records the new
// cluster ID in the node state.
//
// The old data directory is removed, not kept: the host's file API has no
// rename, and the snapshot file is the backup. A run that stops part-way is
// re-run as is: every step from the stop on is repeated whole.
func (n *Node) SnapshotRestore(ctx context.Context, w io.Writer, dbPath string) (err error) {
	var changed bool
	defer refuseUntilChanged(&err, &changed)
	h := n.env.Host
	release, err := nodelock.AcquireBoth(h, "stratum snapshot restore", n.lockOptions(ctx)...)
	if err != nil {
		return err
	}
	defer release()
	if err := n.refuseResetUnderWay("snapshot restore"); err != nil {
		return err
	}
	// Restore into scratch first: a snapshot that fails its hash check, or
	// holds data this node's etcd would not start on, refuses here, with the
	// control plane still running.
	began := time.Now()
	rs, err := n.prepareRestore(ctx, dbPath)
	if err != nil {
		return stoppedRefusal(ctx, "snapshot restore", err)
	}
	defer rs.cleanup()
	// Stopped (Ctrl-C) during the scratch restore, which may not have
	// noticed: nothing was changed yet, and the stop is not begun.
	if err := ctx.Err(); err != nil {
		return stoppedRefusal(ctx, "snapshot restore", err)
	}
	st, out := rs.state, rs.dataDir
	fmt.Fprintf(w, "restoring %s (revision %d, %d keys) as a new single-member cluster %s=%s\n", dbPath, rs.status.Revision, rs.status.TotalKeys, st.Etcd.Name, st.Etcd.PeerURL)
	fmt.Fprintln(w, rs.revisionLine())
	n.stepDone("restore into scratch (hash verified)", time.Since(began))
	initial := st.Etcd.Name + "=" + st.Etcd.PeerURL

	// From here until the node state records the new membership, `stratum
	// up` (a reboot) must not start etcd from the old one. A journal an
	// earlier run left stays on a failed stop: that run may have begun
	// replacing the data.
	earlier := n.dataReplaceUnderWay()
	if err := n.beginDataReplace("a snapshot restore", fmt.Sprintf("`stratum snapshot restore %s`", dbPath), earlier); err != nil {
		changed = !IsRefusal(err) // a journal that could not be undone is a change
		return fmt.Errorf("snapshot restore: %w", err)
	}
	changed = true
	began = time.Now()
	if err := n.stopControlPlane(ctx); err != nil {
		return n.restoreLeftUntouched(fmt.Errorf("snapshot restore: %w", err), earlier, ", but the control plane may be stopped in part (`stratum status` says what runs)")
	}
	n.stepDone("stop the control plane", time.Since(began))
	if err := n.checkpoint(ctx, CheckpointRestoreAfterStop); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		// Stopped (Ctrl-C) during the stop, which finished: the data is
		// not yet touched by this run.
		return n.restoreLeftUntouched(fmt.Errorf("snapshot restore stopped once the control plane was stopped: %w", context.Cause(ctx)), earlier, "")
	}
	fmt.Fprintf(w, "control plane stopped; replacing %s\n", version.EtcdDataDir)
	began = time.Now()
	if err := wipeEtcdData(h); err != nil {
		return fmt.Errorf("snapshot restore: remove %s: %w; the control plane is stopped: re-run the restore", version.EtcdDataDir, err)
	}
	if err := copyTreeToHost(h, out, version.EtcdDataDir); err != nil {
		return fmt.Errorf("snapshot restore: write the restored data to %s: %w; the control plane is stopped: re-run the restore", version.EtcdDataDir, err)
	}
	if err := n.checkpoint(ctx, CheckpointRestoreAfterData); err != nil {
		return err
	}
	st.Etcd.InitialCluster = initial
	st.Etcd.InitialClusterState = "new"
	st.Etcd.ClusterID, st.Etcd.MemberID = "", ""
	if err := nodestate.Save(h, st); err != nil {
		return fmt.Errorf("snapshot restore: %w; the restored data is in place and the control plane is stopped: re-run the restore", err)
	}
	if err := n.endDataReplace(); err != nil {
		return fmt.Errorf("snapshot restore: the restored data and its membership are recorded, but %w; the control plane is stopped: re-run the restore", err)
	}
	n.stepDone("replace the etcd data and record the new membership", time.Since(began))
	began = time.Now()
	if _, err := n.StartControlPlane(ctx); err != nil {
		return fmt.Errorf("snapshot restore: data restored, but the control plane did not start: %w; run `stratum up`, then `stratum etcd rejoin --server %s` on every other control plane", err, urlHostOf(st.Etcd.ClientURL))
	}
	n.stepDone("start the control plane", time.Since(began))
	status, err := n.etcdStatus(ctx, urlHostOf(st.Etcd.ClientURL))
	if err != nil {
		return fmt.Errorf("snapshot restore: restored etcd started, but its cluster ID could not be read: %w", err)
	}
	st.Etcd.ClusterID = fmt.Sprintf("%x", status.Header.ClusterId)
	st.Etcd.Started = true // it serves on the restored data (the start recorded it too; this st is older)
	if err := nodestate.Save(h, st); err != nil {
		return fmt.Errorf("snapshot restore: restored and started, but the cluster ID was not recorded: %w", err)
	}
	fmt.Fprintf(w, "restored: etcd cluster %s with one member %s; now run `stratum etcd rejoin --server %s` on every other control plane\n",
		st.Etcd.ClusterID, st.Etcd.Name, urlHostOf(st.Etcd.ClientURL))
	return nil
}

// preparedRestore is what a restore has checked and made before it changes
// anything: the node state, the snapshot's status, and the snapshot restored
// into a scratch data directory, which cleanup removes.
type preparedRestore struct {
	state   *nodestate.NodeState
	status  SnapshotStatus
	dataDir string
	cleanup func()
	// oldRevision is the highest revision a member of the old cluster
	// reported, and oldAt that member's IP ("" when none answered). When
	// none answered, localRevision is the revision of this node's own etcd
	// data read offline, or localErr why it could not be read. revision is
	// the restored cluster's first.
	oldRevision   int64
	oldAt         string
	localRevision int64
	localErr      error
	revision      int64
}

// revisionLine says where the restored cluster's revision starts and why.
func (p preparedRestore) revisionLine() string {
	switch {
	case p.oldAt != "":
		return fmt.Sprintf("the old cluster is at revision %d (member %s): the restored revisions start at %d, past anything its watchers saw", p.oldRevision, p.oldAt, p.revision)
	case p.localErr == nil:
		return fmt.Sprintf("no member of the old cluster answered; this node's own etcd data, read offline, is at revision %d: the restored revisions start at %d, past it", p.localRevision, p.revision)
	case errors.Is(p.localErr, fs.ErrNotExist):
		return fmt.Sprintf("no member of the old cluster answered, and this node holds no etcd data of it: the restored revisions start at %d, %d past the snapshot's", p.revision, restoreRevisionBump)
	default:
		return fmt.Sprintf("no member of the old cluster answered, and this node's own etcd data could not be read (%v): the restored revisions start at %d, %d past the snapshot's", p.localErr, p.revision, restoreRevisionBump)
	}
}

// prepareRestore runs a restore's refusals (SnapshotRestore's and its dry
// run's alike), each saying nothing was changed: the node is a control plane
// with an etcd member, the snapshot at dbPath reads and restores with its
// hash verified, and its data is of an etcd no newer than this node's.
func (n *Node) prepareRestore(ctx context.Context, dbPath string) (preparedRestore, error) {
	st, err := nodestate.Load(n.env.Host)
	if err != nil {
		return preparedRestore{}, fmt.Errorf("snapshot restore: %w", err)
	}
	if st.Role != nodestate.RoleControlPlane || st.Etcd.Name == "" || st.Etcd.PeerURL == "" {
		return preparedRestore{}, fmt.Errorf("snapshot restore: node state %s is not a control plane's with an etcd member; nothing was changed", nodestate.Path)
	}
	ss, err := snapshotStatus(dbPath)
	if err != nil {
		return preparedRestore{}, fmt.Errorf("snapshot restore: %s is not a readable etcd snapshot (%v); nothing was changed", dbPath, err)
	}
	p := preparedRestore{state: st, status: ss}
	p.oldRevision, p.oldAt = n.oldClusterRevision(ctx, st)
	if p.oldAt == "" {
		// The disaster a restore is for: this member's own data is as far
		// as anything its watchers saw, bar the last writes still only in
		// its WAL, which the bump dwarfs.
		p.localRevision, p.localErr = n.localDataRevision()
		p.oldRevision = p.localRevision
	}
	bump := int64(restoreRevisionBump)
	if p.oldRevision > ss.Revision {
		bump += p.oldRevision - ss.Revision
	}
	p.revision = ss.Revision + bump
	if p.dataDir, p.cleanup, err = restoreToScratch(st, dbPath, uint64(bump)); err != nil {
		return preparedRestore{}, err
	}
	if err := checkRestoredDataFits(p.dataDir, dbPath, n.localEtcdVersion(ctx)); err != nil {
		p.cleanup()
		return preparedRestore{}, err
	}
	return p, nil
}

// oldClusterRevision is the highest revision that a member of this node's
// current cluster reports, and that member's IP: this node's own member, its
// initial cluster's peers and the members its own member lists are asked,
// each group at once, so a cluster that is down costs one read timeout. A
// cluster none of whose members answers (the disaster a restore is for)
// gives 0, "".
func (n *Node) oldClusterRevision(ctx context.Context, st *nodestate.NodeState) (rev int64, at string) {
	own := urlHostOf(st.Etcd.ClientURL)
	var mu sync.Mutex
	asked := map[string]bool{}
	ask := func(ips []string) {
		var wg sync.WaitGroup
		for _, ip := range ips {
			if asked[ip] {
				continue
			}
			asked[ip] = true
			wg.Go(func() {
				s, err := n.etcdStatus(ctx, ip)
				mu.Lock()
				defer mu.Unlock()
				if err == nil && s.Header.Revision > rev {
					rev, at = s.Header.Revision, ip
				}
			})
		}
		wg.Wait()
	}
	var listed []string
	var wg sync.WaitGroup
	wg.Go(func() { listed, _ = n.MemberClientIPsVia(ctx, []string{own}) })
	ask(append([]string{own}, peerIPs(st.Etcd.InitialCluster, st.Etcd.PeerURL)...))
	wg.Wait()
	ask(listed)
	return rev, at
}

// localDataRevision is the revision of this node's own etcd data, read
// offline: its backend is streamed out of the host (host.Files' Open) into a
// scratch file and read there, so an etcd that is hung but still holds the
// file's lock neither blocks the read nor is disturbed by it. A node with no
// etcd data gives an error matching fs.ErrNotExist.
func (n *Node) localDataRevision() (int64, error) {
	src := datadir.ToBackendFileName(version.EtcdDataDir)
	r, err := n.env.Host.Open(src)
	if err != nil {
		return 0, err
	}
	defer r.Close()
	n.log.Info("no member of the old cluster answered: reading this node's etcd data offline", "path", src)
	// In a restore scratch directory: a process killed before it removes
	// its copy of the cluster's data leaves it to the next restore's sweep.
	dir, cleanup, err := newRestoreScratch()
	if err != nil {
		return 0, err
	}
	defer cleanup()
	copied := filepath.Join(dir, "old-etcd.db")
	scratch, err := os.OpenFile(copied, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return 0, fmt.Errorf("scratch file: %w", err)
	}
	_, err = io.Copy(scratch, r)
	if cerr := scratch.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, fmt.Errorf("copy %s: %w", src, err)
	}
	rev, err := backendRevision(copied)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", src, err)
	}
	return rev, nil
}

// backendRevision is the revision an etcd starting on the backend file p
// would be at: its newest key's, or its finished compaction's when that is
// later (as etcd's mvcc store restores it; a restore marked compacted past
// its keys is such a backend). A damaged file is an error, not a crash.
func backendRevision(p string) (rev int64, err error) {
	db, err := bolt.Open(p, 0o400, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return 0, err
	}
	defer db.Close()
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("damaged etcd backend: %v", r)
		}
	}()
	err = db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket(schema.Key.Name()); b != nil {
			if k, _ := b.Cursor().Last(); len(k) >= revBytesLen {
				rev = mvcc.BytesToRev(k).Main
			}
		}
		if b := tx.Bucket(schema.Meta.Name()); b != nil {
			if v := b.Get(schema.FinishedCompactKeyName); len(v) >= revBytesLen {
				rev = max(rev, mvcc.BytesToRev(v).Main)
			}
		}
		return nil
	})
	return rev, err
}

// revBytesLen is the length of an etcd revision as its backend keys it:
// the main and sub revisions (8 bytes each) with a '_' between them.
const revBytesLen = 17

// restoreToScratch restores the snapshot at dbPath with etcd's own restore
// (which verifies its hash) as the new single-member cluster of st's member,
// into a scratch directory on the machine running the command: the restored
// data directory, and the cleanup that removes it. Nothing of the node is
// touched.
func restoreToScratch(st *nodestate.NodeState, dbPath string, bump uint64) (string, func(), error) {
	scratch, cleanup, err := newRestoreScratch()
	if err != nil {
		return "", nil, fmt.Errorf("snapshot restore: %w; nothing was changed", err)
	}
	out := filepath.Join(scratch, "etcd")
	token, err := restoreClusterToken()
	if err != nil {
		cleanup()
		return "", nil, fmt.Errorf("snapshot restore: cluster token: %w; nothing was changed", err)
	}
	if err := utlsnapshot.NewV3(zap.NewNop()).Restore(utlsnapshot.RestoreConfig{
		SnapshotPath:        dbPath,
		Name:                st.Etcd.Name,
		OutputDataDir:       out,
		PeerURLs:            []string{st.Etcd.PeerURL},
		InitialCluster:      st.Etcd.Name + "=" + st.Etcd.PeerURL,
		InitialClusterToken: token,
		RevisionBump:        bump,
		MarkCompacted:       true,
	}); err != nil {
		cleanup()
		return "", nil, fmt.Errorf("snapshot restore of %s: %w; nothing was changed", dbPath, err)
	}
	return out, cleanup, nil
}

// newRestoreScratch makes a restore scratch directory in the restore's
// temporary directory (newScratch, restoreTempDir); a copy of the cluster's
// data goes nowhere else.
func newRestoreScratch() (dir string, cleanup func(), err error) {
	return newScratch(restoreScratchParent(), fmt.Sprintf("%s%d-", restoreScratchPrefix, os.Getpid()), restoreScratchPrefix)
}

// restoreScratchParent is the directory restore scratch directories are
// made and swept in: this machine's restoreTempDir.
func restoreScratchParent() string { return restoreTempDir(os.Getenv("TMPDIR"), fsTypeOf) }

// tmpfsMagic is statfs(2)'s f_type of a tmpfs.
const tmpfsMagic = 0x01021994

// restoreTempDir is where a restore's scratch copies go: $TMPDIR when set
// (tmpdir), else /tmp, unless /tmp is a tmpfs (Debian 13's, Fedora's and
// Arch's default, half the memory), where /var/tmp, on disk, is used: a
// restore copies the snapshot's data and this node's database there, as
// large as the cluster's, while etcd and the apiserver still run, and on a
// tmpfs that memory is theirs.
func restoreTempDir(tmpdir string, fsType func(string) (int64, error)) string {
	if tmpdir != "" {
		return tmpdir
	}
	if t, err := fsType("/tmp"); err == nil && t == tmpfsMagic {
		if fi, err := os.Stat("/var/tmp"); err == nil && fi.IsDir() {
			return "/var/tmp"
		}
	}
	return "/tmp"
}

// fsTypeOf is statfs(2)'s file system type of dir.
func fsTypeOf(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Type), nil
}

// newScratch makes a private (0700) scratch directory in parent named
// prefix<random>, locked for this process's life (lockScratch), after
// sweeping the directories named family* there that no process holds any
// more (sweepScratch); cleanup removes it.
func newScratch(parent, prefix, family string) (dir string, cleanup func(), err error) {
	sweepScratch(parent, family)
	dir, err = os.MkdirTemp(parent, prefix)
	if err != nil {
		return "", nil, fmt.Errorf("scratch directory: %w", err)
	}
	held, err := lockScratch(dir, syscall.LOCK_EX)
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("lock the scratch directory %s: %w", dir, err)
	}
	if err := os.WriteFile(filepath.Join(dir, scratchMarker), nil, 0o600); err != nil {
		os.RemoveAll(dir)
		held.Close()
		return "", nil, fmt.Errorf("mark the scratch directory %s: %w", dir, err)
	}
	return dir, func() {
		os.RemoveAll(dir)
		held.Close()
	}, nil
}

// restoreScratchPrefix begins the name of a restore's scratch directory in
// the temporary directory: stratum-restore-<pid>-<random>, the pid naming
// the restoring process for whoever lists the directory.
const restoreScratchPrefix = "stratum-restore-"

// scratchMarker is the empty file every scratch directory holds from its
// making: a sweep removes only directories that have it, never one of the
// user's whose name happens to match (a .stratum-snapshot-archive beside
// their snapshots).
const scratchMarker = ".stratum-scratch"

// snapshotScratchPrefix begins the name of a snapshot save's private
// directory beside the file it saves to.
const snapshotScratchPrefix = ".stratum-snapshot-"

// restoreScratchGrace: a scratch directory younger than this is never swept,
// so one just made, not locked yet, is safe.
const restoreScratchGrace = time.Minute

// lockScratch opens the scratch directory and takes an flock on it (how
// LOCK_EX, with LOCK_NB to try); the restore holds it for its life and the
// kernel drops it when the process dies however it dies. The lock, not the
// pid in the name, says whether a restore still uses the directory: a pid
// may be reused, or belong to another pid namespace sharing /tmp.
func lockScratch(dir string, how int) (*os.File, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), how); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// sweepRestoreScratch sweeps the restore's temporary directory's scratch
// directories (sweepScratch, restoreTempDir).
func sweepRestoreScratch() { sweepScratch(restoreScratchParent(), restoreScratchPrefix) }

// sweepScratch removes the scratch directories named family* in parent that
// no process holds any more: a restore or a snapshot save killed before its
// cleanup (SIGKILL, a power loss where the directory is on disk) leaves a
// copy of the cluster's data, every Secret in it, as large as the cluster's,
// that nothing else removes. Only real directories of this user that hold
// the scratchMarker, older than restoreScratchGrace and whose lock can be
// taken, are removed.
func sweepScratch(parent, family string) {
	dirs, _ := filepath.Glob(filepath.Join(parent, family+"*"))
	for _, d := range dirs {
		fi, err := os.Lstat(d)
		if err != nil || !fi.IsDir() || time.Since(fi.ModTime()) < restoreScratchGrace {
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Geteuid() {
			continue
		}
		if mi, err := os.Lstat(filepath.Join(d, scratchMarker)); err != nil || !mi.Mode().IsRegular() {
			continue // not one stratum made
		}
		held, err := lockScratch(d, syscall.LOCK_EX|syscall.LOCK_NB)
		if err != nil {
			continue // a running restore's or save's, or not ours to open
		}
		_ = os.RemoveAll(d)
		held.Close()
	}
}

// ErrSnapshotNewerThanEtcd matches a restore refused because the snapshot
// holds the data of a newer etcd than this node runs (a snapshot saved
// before a downgrade, restored after it): etcd does not start on storage or
// a cluster version newer than its own, and the restore would have replaced
// the node's data with data its etcd cannot start on.
var ErrSnapshotNewerThanEtcd = errors.New("the snapshot holds a newer etcd's data than this node runs")

// checkRestoredDataFits refuses restored data (the data directory dataDir,
// restored from the snapshot at dbPath) that etcd at version local would not
// start on: a storage version (etcd's schema.Validate) or a cluster version
// (etcd's downgrade check at recovery) whose major.minor is above local's.
// It reads the restored backend, not the snapshot file, because that is the
// data etcd will start on. A local version that does not parse is not judged.
func checkRestoredDataFits(dataDir, dbPath, local string) error {
	storage, cluster, err := restoredVersions(dataDir)
	if err != nil {
		return fmt.Errorf("snapshot restore: read the versions of the data restored from %s: %w; nothing was changed", dbPath, err)
	}
	for _, v := range []struct{ what, version string }{{"storage version", storage}, {"cluster version", cluster}} {
		if !newerMinor(v.version, local) {
			continue
		}
		vv, lv := versionMajorMinor(v.version), strings.TrimPrefix(local, "v")
		return fmt.Errorf("snapshot restore: %w: %s holds data at etcd %s %s, and this node runs etcd %s, which does not start on a newer etcd's data (a snapshot saved before a downgrade); nothing was changed: restore a snapshot saved since the cluster runs etcd %s, or restore this one on a control plane running etcd %s (the stratum release that pins it)",
			ErrSnapshotNewerThanEtcd, dbPath, v.what, vv, lv, versionMajorMinor(local), vv)
	}
	return nil
}

// restoredVersions reads the storage version and the cluster version that
// the etcd data directory dataDir records ("" for one it does not record:
// data of an etcd before 3.6 has no storage version).
func restoredVersions(dataDir string) (storage, cluster string, err error) {
	path := datadir.ToBackendFileName(dataDir)
	if _, err := os.Stat(path); err != nil {
		return "", "", err
	}
	be := backend.NewDefaultBackend(zap.NewNop(), path)
	defer be.Close()
	if v, err := schema.DetectSchemaVersion(zap.NewNop(), be.ReadTx()); err == nil {
		storage = v.String()
	}
	if v := schema.NewMembershipBackend(zap.NewNop(), be).ClusterVersionFromBackend(); v != nil {
		cluster = v.String()
	}
	return storage, cluster, nil
}

// controlPlaneServices are what stopControlPlane stops, in order: the
// clients of the apiserver first, etcd last.
var controlPlaneServices = []string{ServiceVIP, serviceOperator, ServiceAPIServer, ServiceEtcd}

// serviceOperator is the stratum-operator host service.
const serviceOperator = "stratum-operator"

// stopControlPlane stops the local control plane's services; a service this
// host does not know is not running. A stop that reports an error but leaves
// the service stopped (a kube-apiserver whose etcd has lost its quorum does
// not shut down gracefully, and is killed once its stop times out) is a
// warning, not a failure: what the caller needs is the service stopped.
func (n *Node) stopControlPlane(ctx context.Context) error {
	for _, s := range controlPlaneServices {
		if err := n.stopService(ctx, s); err != nil {
			return err
		}
	}
	return nil
}

// restoreLeftUntouched is err, a restore's failure or stop after its
// journal was written and before it touched the etcd data, with what was
// left: the journal this run wrote goes (the data is as it was, which
// `stratum up` may start again), unless an earlier run's was there, which
// may have replaced part of it. state says how the control plane was left.
func (n *Node) restoreLeftUntouched(err error, earlier bool, state string) error {
	if earlier {
		return fmt.Errorf("%w; an earlier run may have replaced part of the etcd data, so `stratum up` stays refused: re-run the restore", err)
	}
	if jerr := n.endDataReplace(); jerr != nil {
		return fmt.Errorf("%w; etcd data not touched, but %w: re-run the restore", err, jerr)
	}
	return fmt.Errorf("%w; etcd data not touched%s: re-run the restore, or `stratum up` to start the control plane again on its old data", err, state)
}

// etcdStatus is the Status of the etcd member at cpIP (its own view: no
// quorum needed).
func (n *Node) etcdStatus(ctx context.Context, cpIP string) (*clientv3.StatusResponse, error) {
	ep := EtcdEndpoint(cpIP)
	cli, err := n.etcdClient(ep)
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	rctx, cancel := context.WithTimeout(ctx, n.readTimeout())
	defer cancel()
	st, err := cli.Status(rctx, ep)
	if err != nil {
		return nil, fmt.Errorf("%w of %s: %w", ErrEtcdNoStatus, ep, err)
	}
	return st, nil
}

// copyTreeToHost copies the real directory src to dst on the host,
// directories private (0700, etcd's own mode) and files with their modes.
// Files are streamed (host.Files' WriteFrom), never read whole: the
// restored etcd database can be gigabytes.
func copyTreeToHost(h host.Files, src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := path.Join(dst, filepath.ToSlash(rel))
		if d.IsDir() {
			return h.MkdirAll(target, 0o700)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		return h.WriteFrom(target, f, info.Mode().Perm())
	})
}

// dirEmpty reports whether the host directory p is absent or empty.
func dirEmpty(h host.Files, p string) (bool, error) {
	entries, err := h.ReadDir(p)
	if errors.Is(err, fs.ErrNotExist) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return len(entries) == 0, nil
}
