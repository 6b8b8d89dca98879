package dsn

import (
	"io"
	"net/url"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// Mask replaces a password in everything printed.
const Mask = "xxxxx"

// Source names where a connection string came from, for messages.
type Source string

// The sources Resolve reports, in the order it tries them.
const (
	FromFlag       Source = "--database-url"
	FromPgfenceEnv Source = "PGFENCE_DATABASE_URL"
	FromEnv        Source = "DATABASE_URL"
	FromLibpqEnv   Source = "the libpq PG* environment variables"
)

// libpqVars are the libpq environment variables that choose a server, a
// user or a database; Describe lists the ones that are set.
var libpqVars = []string{"PGHOST", "PGHOSTADDR", "PGPORT", "PGUSER", "PGPASSWORD", "PGPASSFILE",
	"PGDATABASE", "PGSERVICE", "PGSERVICEFILE", "PGSSLMODE", "PGAPPNAME", "PGCONNECT_TIMEOUT", "PGTARGETSESSIONATTRS"}

// Describe says where the connection settings really came from, for
// messages: for FromLibpqEnv it names the PG* variables that are set, or
// says that none is and libpq's defaults apply (the local socket, the OS
// user's name as user and database). Values are never printed.
func Describe(src Source) string {
	if src != FromLibpqEnv {
		return string(src)
	}
	var set []string
	for _, v := range libpqVars {
		if os.Getenv(v) != "" {
			set = append(set, v)
		}
	}
	if len(set) == 0 {
		return "libpq defaults: no --database-url, PGFENCE_DATABASE_URL, DATABASE_URL or PG* variable is set"
	}
	return "the libpq variables " + strings.Join(set, ", ")
}

// minSecretLength is the shortest secret that is scrubbed.
const minSecretLength = 3

// Resolve picks the connection string: the flag's value when non-empty, then
// PGFENCE_DATABASE_URL, then DATABASE_URL. When none is set it returns ""
// with FromLibpqEnv: pgx then reads PGHOST, PGPORT, PGUSER, PGPASSWORD,
// PGDATABASE, PGSSLMODE and the other libpq variables (and ~/.pgpass).
func Resolve(flagValue string) (string, Source) {
	if v := strings.TrimSpace(flagValue); v != "" {
		return v, FromFlag
	}
	for _, s := range []Source{FromPgfenceEnv, FromEnv} {
		if v := strings.TrimSpace(os.Getenv(string(s))); v != "" {
			return v, s
		}
	}
	return "", FromLibpqEnv
}

var (
	kvQuoted = regexp.MustCompile(`(?i)((?:ssl)?password\s*=\s*)'(?:[^'\\]|\\.)*'`)
	kvPlain  = regexp.MustCompile(`(?i)((?:ssl)?password\s*=\s*)[^\s'&]+`)
	userinfo = regexp.MustCompile(`(?i)(postgres(?:ql)?://[^:/@?#\s]*:)[^\s]*@`)
)

// Redact returns s with every password it can recognise replaced by Mask:
// the password in a URL's userinfo, password= and sslpassword= in a
// keyword/value string or a URL's query. It is for display; it does not
// promise to find a password in a string too malformed to parse, which is
// why output also goes through a Scrubber.
func Redact(s string) string {
	if s == "" {
		return s
	}
	if u, err := url.Parse(s); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		if u.User != nil {
			if _, has := u.User.Password(); has {
				u.User = url.UserPassword(u.User.Username(), Mask)
			}
		}
		q := u.Query()
		changed := false
		for k := range q {
			if strings.EqualFold(k, "password") || strings.EqualFold(k, "sslpassword") {
				q.Set(k, Mask)
				changed = true
			}
		}
		if changed {
			u.RawQuery = q.Encode()
		}
		out := u.String()
		// url.String escapes the mask's neighbours; keep it readable.
		return strings.Replace(out, url.QueryEscape(Mask), Mask, -1)
	}
	return redactText(s)
}

// redactText masks the password patterns Redact knows, anywhere in text.
func redactText(s string) string {
	s = userinfo.ReplaceAllString(s, "${1}"+Mask+"@")
	s = kvQuoted.ReplaceAllString(s, "${1}"+Mask)
	s = kvPlain.ReplaceAllString(s, "${1}"+Mask)
	return s
}

// Secrets returns the passwords a connection string carries or implies, in
// every form they may be printed in: as written and percent-decoded, from the
// URL's userinfo and from password= values, and PGPASSWORD. For a string too
// malformed to parse it guesses the userinfo password (between the first ':'
// after the scheme and the last '@'). Values shorter than 3 bytes are left
// out: replacing them everywhere would garble the output.
func Secrets(s string) []string {
	var out []string
	add := func(v string) {
		if len(v) >= minSecretLength {
			out = append(out, v)
			if d, err := url.PathUnescape(v); err == nil && d != v && len(d) >= minSecretLength {
				out = append(out, d)
			}
			if d, err := url.QueryUnescape(v); err == nil && d != v && len(d) >= minSecretLength {
				out = append(out, d)
			}
		}
	}
	if rest, ok := cutScheme(s); ok {
		// Userinfo ends at the last '@' before the path or query.
		end := len(rest)
		if i := strings.IndexAny(rest, "/?#"); i >= 0 {
			// A password may itself hold '/' or '?': prefer the last '@'.
			if j := strings.LastIndex(rest, "@"); j > i {
				end = len(rest)
			} else {
				end = i
			}
		}
		head := rest[:end]
		if at := strings.LastIndex(head, "@"); at >= 0 {
			if colon := strings.Index(head[:at], ":"); colon >= 0 {
				add(head[colon+1 : at])
			}
		}
		if u, err := url.Parse(s); err == nil {
			if u.User != nil {
				if p, ok := u.User.Password(); ok {
					add(p)
				}
			}
			for k, vs := range u.Query() {
				if strings.EqualFold(k, "password") || strings.EqualFold(k, "sslpassword") {
					for _, v := range vs {
						add(v)
					}
				}
			}
		}
	}
	// A URL inside other text (an error message): its userinfo password,
	// as Redact's pattern sees it. Without it, a password= value that
	// swallowed the '@' would be masked first and the password left bare.
	for _, m := range userinfo.FindAllStringSubmatch(s, -1) {
		add(strings.TrimSuffix(strings.TrimPrefix(m[0], m[1]), "@"))
	}
	for _, m := range kvQuoted.FindAllStringSubmatch(s, -1) {
		v := strings.TrimPrefix(m[0], m[1])
		add(strings.Trim(v, "'"))
	}
	for _, m := range kvPlain.FindAllStringSubmatch(s, -1) {
		add(strings.TrimPrefix(m[0], m[1]))
	}
	add(os.Getenv("PGPASSWORD"))
	return out
}

func cutScheme(s string) (string, bool) {
	for _, p := range []string{"postgres://", "postgresql://"} {
		if len(s) >= len(p) && strings.EqualFold(s[:len(p)], p) {
			return s[len(p):], true
		}
	}
	return "", false
}

// Scrubber replaces known secrets in text. The zero value scrubs nothing;
// it is safe for concurrent use.
type Scrubber struct {
	mu      sync.RWMutex
	secrets []string
}

// Add registers more secrets (empty and very short ones are ignored).
func (s *Scrubber) Add(secrets ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range secrets {
		if len(v) >= minSecretLength {
			s.secrets = append(s.secrets, v)
		}
	}
	// Longest first, so a secret that contains another is replaced whole.
	sort.Slice(s.secrets, func(i, j int) bool { return len(s.secrets[i]) > len(s.secrets[j]) })
}

// String returns text with every registered secret replaced by Mask, and
// with the password patterns Redact knows (URL userinfo, password=) masked.
func (s *Scrubber) String(text string) string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, v := range s.secrets {
		text = strings.ReplaceAll(text, v, Mask)
	}
	return redactText(text)
}

// Tokens is String for data (a list of leases, fences, keys), where a short
// secret may occur by coincidence inside other characters: a registered
// secret is masked only where it stands as a whole token, with no letter or
// digit right before or after it. A password "1759" then leaves fence
// 17592186044417 whole (String made it xxxxx2186044417, breaking list
// --json), while a key or owner that is the password, or holds it between
// separators, is still masked. The password patterns of Redact are masked as
// in String.
func (s *Scrubber) Tokens(text string) string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, v := range s.secrets {
		text = replaceTokens(text, v)
	}
	return redactText(text)
}

// replaceTokens replaces each occurrence of v in text that has no letter or
// digit on either side (beyond v's own ends) with Mask.
func replaceTokens(text, v string) string {
	var b strings.Builder
	rest := text
	for {
		i := strings.Index(rest, v)
		if i < 0 {
			break
		}
		j := i + len(v)
		before, _ := utf8.DecodeLastRuneInString(rest[:i])
		after, _ := utf8.DecodeRuneInString(rest[j:])
		if (i > 0 && alnum(before)) || (j < len(rest) && alnum(after)) {
			b.WriteString(rest[:i+1]) // not a token here: look again one byte on
			rest = rest[i+1:]
			continue
		}
		b.WriteString(rest[:i])
		b.WriteString(Mask)
		rest = rest[j:]
	}
	if b.Len() == 0 {
		return text
	}
	b.WriteString(rest)
	return b.String()
}

func alnum(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }

// Writer returns a writer that scrubs each Write with String before passing
// it to w. A secret split across two Write calls is not caught; fmt.Fprint
// and the log package write each message in one call.
func (s *Scrubber) Writer(w io.Writer) io.Writer { return &scrubWriter{scrub: s.String, w: w} }

// TokenWriter is Writer with Tokens, for output that is data.
func (s *Scrubber) TokenWriter(w io.Writer) io.Writer { return &scrubWriter{scrub: s.Tokens, w: w} }

type scrubWriter struct {
	scrub func(string) string
	w     io.Writer
}

func (sw *scrubWriter) Write(p []byte) (int, error) {
	out := sw.scrub(string(p))
	if _, err := io.WriteString(sw.w, out); err != nil {
		return 0, err
	}
	return len(p), nil
}
