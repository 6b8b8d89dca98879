package watch

import (
	"testing"
	"time"
)

func TestIsLoopbackHost(t *testing.T) {
	for host, want := range map[string]bool{
		"127.0.0.1:9187": true, "127.1.2.3": true, "localhost:80": true, "LocalHost": true,
		"[::1]:9187": true, "::1": true,
		"0.0.0.0:9187": false, ":9187": false, "[::]:0": false, "10.0.0.1:9187": false,
		"attacker.example:9187": false, "localhost.attacker.example": false, "": false,
	} {
		if got := IsLoopbackHost(host); got != want {
			t.Errorf("IsLoopbackHost(%q) = %v, want %v", host, got, want)
		}
	}
}

// The change over a window is measured from the newest sample at least
// that old; while serve has run for less than the window, from the oldest
// sample, and the coverage says so.
func TestChanges(t *testing.T) {
	now := time.Now()
	w := &Watcher{samples: []sample{
		{now.Add(-7 * time.Minute), 10},
		{now.Add(-4 * time.Minute), 12},
		{now.Add(-90 * time.Second), 15},
		{now.Add(-30 * time.Second), 19},
		{now, 20},
	}}
	got := w.changes(now)
	want := []Change{
		{WindowSeconds: 60, CoveredSeconds: 90, Delta: 20 - 15},
		{WindowSeconds: 300, CoveredSeconds: 420, Delta: 20 - 10},
		{WindowSeconds: 900, CoveredSeconds: 420, Delta: 20 - 10},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("window %v: got %+v, want %+v", want[i].WindowSeconds, got[i], want[i])
		}
	}
}
