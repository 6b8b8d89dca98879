package dsn

import (
	"cmp"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// A password never appears in Redact's output, in any of the forms a
// connection string can carry it: a URL's userinfo, a URL's password= query
// parameter, a keyword/value string's password= (plain or single-quoted).
// And a Scrubber fed with Secrets masks it from any text that holds the
// connection string, however malformed.
func FuzzRedact(f *testing.F) {
	for _, s := range [][3]string{
		{"bob", "hunter22", "db"},
		{"bob", "sp@c/al:pw?x#S3cr3t", "db"},
		{"b:o@b", "p w'\\q", "h"},
		{"", "ünï€ode", "db:5432"},
		{"bob", "%41%42%43", "db"},
	} {
		for form := range uint8(5) {
			f.Add(s[0], s[1], s[2], form)
		}
	}
	f.Fuzz(func(t *testing.T, user, password, host string, form uint8) {
		var conn string
		switch form % 5 {
		case 0: // URL userinfo, encoded as net/url does
			conn = (&url.URL{Scheme: "postgres", User: url.UserPassword(user, password), Host: host, Path: "/app"}).String()
		case 1: // URL query parameter
			conn = "postgresql://" + url.PathEscape(host) + "/app?password=" + url.QueryEscape(password) + "&sslmode=disable"
		case 2: // keyword/value, quoted as libpq reads it
			conn = "host=db user=bob password='" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(password) + "' dbname=app"
		case 3: // keyword/value, plain (only a value without spaces or quotes can be written so)
			if strings.ContainsAny(password, " \t\n\r\f\v'\\&") || password == "" {
				return
			}
			conn = "host=db user=bob password=" + password + " dbname=app"
		case 4: // inside a log line
			conn = fmt.Sprintf("connect to %s failed", (&url.URL{Scheme: "postgres", User: url.UserPassword(user, password), Host: host}).String())
		}
		// The claim holds for passwords that are secrets at all: long
		// enough to be scrubbed, written once, and not also written
		// elsewhere in the string (a password "db" cannot be kept out of
		// host=db).
		if len(password) < minSecretLength || strings.Contains(password, "\x00") {
			return
		}
		forms := []string{password, url.QueryEscape(password), url.PathEscape(password),
			strings.TrimSuffix((&url.URL{User: url.UserPassword("", password)}).String()[3:], "@")} // userinfo encoding, without "//:" and "@"
		// Written once in all: count every form's occurrences, longest
		// first, each masked as it is counted, so that a raw form inside
		// an encoded one is not counted twice, while a raw form that the
		// text holds elsewhere (the password "00 " in "@00 failed", where
		// the password itself was written "00%20") is.
		distinct := slices.Compact(slices.SortedFunc(slices.Values(forms), func(a, b string) int {
			return cmp.Or(cmp.Compare(len(b), len(a)), strings.Compare(a, b))
		}))
		rest, written := conn, 0 // rest: conn with every form masked
		for _, p := range distinct {
			written += strings.Count(rest, p)
			rest = strings.ReplaceAll(rest, p, "\x00")
		}
		if written > 1 {
			return
		}
		if form%5 != 4 {
			if got := Redact(conn); leaks(got, forms) {
				t.Fatalf("Redact(%q) = %q still holds the password %q", conn, got, password)
			}
		}
		var s Scrubber
		s.Add(Secrets(conn)...)
		if got := s.String(conn); leaks(got, forms) {
			t.Fatalf("Scrubber with Secrets(%q) leaves %q, which holds the password %q", conn, got, password)
		}
	})
}

// leaks reports whether out holds a form of the password. The mask counts
// as a wall: "xxxxx dbname" must not count as holding the password "x d".
func leaks(out string, forms []string) bool {
	out = strings.ReplaceAll(out, Mask, "\x00")
	for _, p := range forms {
		if len(p) >= minSecretLength && strings.Contains(out, p) {
			return true
		}
	}
	return false
}
