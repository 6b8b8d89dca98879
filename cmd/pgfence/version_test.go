package main

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestFormatVersion(t *testing.T) {
	for _, c := range []struct {
		info *debug.BuildInfo
		want string
	}{
		{&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.1.0"}},
			"pgfence v0.1.0 (go1.26.8)"},
		{&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.1.1-0.20261201120000-8cc9829abcde"}},
			"pgfence v0.1.0 (module v0.1.1-0.20261201120000-8cc9829abcde; go1.26.8)"},
		{&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "8cc9829abc"}, {Key: "vcs.time", Value: "2026-11-30T22:00:00Z"}, {Key: "vcs.modified", Value: "true"}}},
			"pgfence v0.1.0 (revision 8cc9829abc of 2026-11-30T22:00:00Z, modified; go1.26.8)"},
		{&debug.BuildInfo{GoVersion: "go1.26.8", Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "8cc9829abc"}, {Key: "vcs.modified", Value: "false"}}},
			"pgfence v0.1.0 (revision 8cc9829abc; go1.26.8)"},
	} {
		if got := formatVersion(c.info); got != c.want {
			t.Errorf("formatVersion = %q, want %q", got, c.want)
		}
	}
}

// TestVersion runs the built binary: every spelling prints one line that
// names the release and needs no database.
func TestVersion(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--version"}, {"version"}, {"-version"}} {
		r := pgfence(t, nil, args...)
		wantCode(t, r, 0)
		if !strings.HasPrefix(r.stdout, "pgfence v0.1.0 ") || strings.Count(r.stdout, "\n") != 1 || !strings.Contains(r.stdout, "go1.") {
			t.Errorf("pgfence %v: %s", args, r)
		}
	}
}
