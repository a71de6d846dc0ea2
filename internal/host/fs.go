package host

import (
	"io"
	"io/fs"
	"os"
)

// FS is the file-system calls a Dir makes, on real paths. It is the seam
// under Dir: a fault layer can stand between a Dir and the disk
// (internal/host/faultfs, in the manner of Pebble's errorfs over its vfs)
// while the Dir code that runs is the one production runs. OS is the real
// one, and a Dir with no FS uses it.
//
// Locks are not part of it: they are flock(2) locks on files under the lock
// directory (a tmpfs on a real host), which a Dir takes directly.
type FS interface {
	ReadFile(name string) ([]byte, error)
	// Open opens a file for reading.
	Open(name string) (io.ReadCloser, error)
	Stat(name string) (fs.FileInfo, error)
	ReadDir(name string) ([]fs.DirEntry, error)
	// Mkdir creates one directory; its parent must exist.
	Mkdir(name string, perm fs.FileMode) error
	// CreateTemp creates a new file in dir, open for writing, named from
	// pattern as os.CreateTemp names it.
	CreateTemp(dir, pattern string) (File, error)
	// Rename renames the file oldpath to newpath, replacing newpath
	// atomically.
	Rename(oldpath, newpath string) error
	// Remove removes a file or an empty directory.
	Remove(name string) error
	// RemoveAll removes name and everything under it; a missing name is
	// not an error.
	RemoveAll(name string) error
	// SyncDir fsyncs a directory: the entries created, renamed or removed
	// in it are durable once it returns.
	SyncDir(name string) error
}

// File is a file CreateTemp opened.
type File interface {
	io.Writer
	// Name is the file's real path.
	Name() string
	Chmod(mode fs.FileMode) error
	// Sync fsyncs the file: what was written is durable once it returns.
	Sync() error
	Close() error
}

// OS is FS on the operating system's own calls.
var OS FS = osFS{}

type osFS struct{}

func (osFS) ReadFile(name string) ([]byte, error)       { return os.ReadFile(name) }
func (osFS) Open(name string) (io.ReadCloser, error)    { return os.Open(name) }
func (osFS) Stat(name string) (fs.FileInfo, error)      { return os.Stat(name) }
func (osFS) ReadDir(name string) ([]fs.DirEntry, error) { return os.ReadDir(name) }
func (osFS) Mkdir(name string, perm fs.FileMode) error  { return os.Mkdir(name, perm) }
func (osFS) Rename(oldpath, newpath string) error       { return os.Rename(oldpath, newpath) }
func (osFS) Remove(name string) error                   { return os.Remove(name) }
func (osFS) RemoveAll(name string) error                { return os.RemoveAll(name) }

// CreateTemp returns the *os.File itself, so io.Copy into it still uses
// copy_file_range when the source is a file.
func (osFS) CreateTemp(dir, pattern string) (File, error) {
	f, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return nil, err
	}
	return f, nil
}

func (osFS) SyncDir(name string) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
