package main

import (
	"fmt"
	"runtime/debug"
	"strings"
)

// release is the version of pgfence this source tree is.
const release = "v0.1.0"

// versionLine describes this binary: the release, then, from the build
// information the Go toolchain embeds, the module version when it differs
// from the release (a pseudo-version of a build between releases), the VCS
// revision and whether the tree had uncommitted changes, when the build
// stamped them, and the Go version.
func versionLine() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "pgfence (no build information)"
	}
	return formatVersion(info)
}

// formatVersion is versionLine for a given BuildInfo.
func formatVersion(info *debug.BuildInfo) string {
	var details []string
	if v := info.Main.Version; v != "" && v != "(devel)" && v != release {
		details = append(details, "module "+v)
	}
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
	return fmt.Sprintf("pgfence %s (%s)", release, strings.Join(details, "; "))
}
