package validate

import (
	"strings"
	"testing"
	"time"
)

func TestKey(t *testing.T) {
	for key, ok := range map[string]bool{
		"invoice:inv_72":            true,
		strings.Repeat("é", 256):    true, // 512 bytes
		strings.Repeat("k", 513):    false,
		"":                          false,
		"bad\xff":                   false,
		"nul\x00":                   false,
		"spaces and: punctuation!?": true,
	} {
		if err := Key(key); (err == nil) != ok {
			t.Errorf("Key(%q) = %v, want ok=%v", key, err, ok)
		}
	}
}

func TestOwner(t *testing.T) {
	for label, ok := range map[string]bool{
		"host-1/4242":            true,
		strings.Repeat("é", 128): true, // 256 bytes
		strings.Repeat("o", 257): false,
		"":                       false,
		"own\xffer":              false,
		"own\x00er":              false,
	} {
		if err := Owner(label); (err == nil) != ok {
			t.Errorf("Owner(%q) = %v, want ok=%v", label, err, ok)
		}
	}
}

func TestIdentifier(t *testing.T) {
	for name, ok := range map[string]bool{
		"last_fence":             true,
		"My Emails":              true,
		"Ünïcode":                true,
		"":                       false,
		strings.Repeat("x", 64):  false,
		" leading":               false,
		"trailing ":              false,
		`a"b`:                    false,
		"a'b":                    false,
		"a;b":                    false,
		`a\b`:                    false,
		"a--b":                   false,
		"a/*b":                   false,
		"x$$y":                   false, // ends a dollar-quoted body (migrations)
		"x$y":                    true,
		"a*/b":                   false,
		"tab\tname":              false,
		"new\nline":              false,
		"nul\x00":                false,
		"\xff":                   false,
		"jobs; DROP TABLE x; --": false,
		"pgfence_jobs":           true,
	} {
		if err := Identifier("table", name); (err == nil) != ok {
			t.Errorf("Identifier(%q) = %v, want ok=%v", name, err, ok)
		}
	}
}

func TestDuration(t *testing.T) {
	if Duration("ttl", time.Second, time.Hour) != nil {
		t.Error("1s refused")
	}
	for _, d := range []time.Duration{0, -time.Second, 2 * time.Hour} {
		if Duration("ttl", d, time.Hour) == nil {
			t.Errorf("%v accepted", d)
		}
	}
}
