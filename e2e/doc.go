// Package e2e holds the end-to-end test of the real stratum binary. Its
// harness (harness_test.go) builds hosts out of Linux namespaces: each host is
// a network namespace joined by a veth pair to a bridge in a namespace of its
// own, with a private mount and UTS namespace (its own hostname and its own
// /etc/stratum, /var/lib/stratum, /run/stratum and /var/log/stratum). A host
// may instead be booted into systemd (harness_machine_test.go): a container
// of its own, systemd-nspawn's, in the host's network namespace, whose PID 1
// is systemd. The tests need root; without it, or without namespace support
// (or systemd-nspawn, for a booted host), they skip, and fail instead when
// CI=true.
package e2e
