package main

import (
	"fmt"
	"runtime/debug"
	"strings"
)

// demoMoved answers the demo subcommand of earlier versions: the demo
// links the test harness (a throwaway PostgreSQL), which the CLI must not,
// so it became an example.
const demoMoved = `pgfence: the demo is no longer a pgfence command; run it as an example:
  go run ./examples/demo                                   (in a checkout of pgfence)
  go run github.com/pgfence/pgfence/examples/demo@latest   (anywhere)
`

// versionLine describes this binary from the build information the Go
// toolchain embeds: the module version (a tag, a pseudo-version, or
// "(devel)" for a build from a working tree), and, when the build stamped
// them, the VCS revision and whether the tree had uncommitted changes.
func versionLine() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "pgfence (no build information)"
	}
	return formatVersion(info)
}

// formatVersion is versionLine for a given BuildInfo.
func formatVersion(info *debug.BuildInfo) string {
	version := info.Main.Version
	if version == "" {
		version = "(devel)"
	}
	var details []string
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	if rev := settings["vcs.revision"]; rev != "" {
		d := "revision " + rev
		if t := settings["vcs.time"]; t != "" {
			d += " of " + t
		}
		if settings["vcs.modified"] == "true" {
			d += ", modified"
		}
		details = append(details, d)
	}
	details = append(details, info.GoVersion)
	return fmt.Sprintf("pgfence %s (%s)", version, strings.Join(details, "; "))
}
