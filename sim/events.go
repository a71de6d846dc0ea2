package sim

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// Event is one thing that happened in a simulation: an action, a fault, a
// checkpoint reached, a service started or stopped.
type Event struct {
	Time time.Time `json:"time"`
	// Host is the host it happened on, "" for the cluster as a whole.
	Host string `json:"host,omitempty"`
	// Kind classifies it: "action", "fault", "heal", "checkpoint", "crash",
	// "service", "vip", "leader", "error". A "leader" event is an embedded
	// etcd member's view of its leader changing ("etcd leader is now cp2
	// (term 3)", "etcd has no leader"), recorded on that member's host; a
	// member run as a process (Host.SetEtcdVersion) records none.
	Kind string `json:"kind"`
	What string `json:"what"`
}

// EventKinds are the kinds an Event has: the simulator's own, and "client",
// which the scenarios record for their clients' operations.
var EventKinds = []string{"action", "fault", "heal", "checkpoint", "crash", "service", "vip", "leader", "client", "error"}

func (e Event) String() string {
	host := e.Host
	if host == "" {
		host = "-"
	}
	return fmt.Sprintf("%s %-5s %-10s %s", e.Time.Format("15:04:05.000"), host, e.Kind, e.What)
}

// EventLog records a simulation's events in order. It is safe for concurrent use.
type EventLog struct {
	mu     sync.Mutex
	start  time.Time
	events []Event
	// tee, when set, also receives every event as it is recorded.
	tee io.Writer
}

func newEventLog(tee io.Writer) *EventLog {
	return &EventLog{start: time.Now(), tee: tee}
}

// Record appends an event.
func (l *EventLog) Record(host, kind, format string, args ...any) {
	e := Event{Time: time.Now(), Host: host, Kind: kind, What: fmt.Sprintf(format, args...)}
	l.mu.Lock()
	l.events = append(l.events, e)
	tee := l.tee
	l.mu.Unlock()
	if tee != nil {
		fmt.Fprintln(tee, e.String())
	}
}

// Events returns a copy of the events recorded so far.
func (l *EventLog) Events() []Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Event(nil), l.events...)
}

// Find returns the events of the given kind whose text contains substr.
func (l *EventLog) Find(kind, substr string) []Event {
	var out []Event
	for _, e := range l.Events() {
		if (kind == "" || e.Kind == kind) && strings.Contains(e.What, substr) {
			out = append(out, e)
		}
	}
	return out
}

// String is the whole log as a timeline, one event a line, with the time
// since the simulation started.
func (l *EventLog) String() string {
	var b strings.Builder
	for _, e := range l.Events() {
		host := e.Host
		if host == "" {
			host = "-"
		}
		fmt.Fprintf(&b, "%8.3fs %-5s %-10s %s\n", e.Time.Sub(l.start).Seconds(), host, e.Kind, e.What)
	}
	return b.String()
}

// MarshalJSON encodes the events as a JSON array, for tools.
func (l *EventLog) MarshalJSON() ([]byte, error) { return json.Marshal(l.Events()) }
