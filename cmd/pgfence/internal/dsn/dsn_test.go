package dsn

import (
	"bytes"
	"strings"
	"testing"
)

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://bob:hunter22@db:5432/app?sslmode=disable": "postgres://bob:xxxxx@db:5432/app?sslmode=disable",
		"postgres://bob@db/app":                               "postgres://bob@db/app",
		"postgresql://db/app?password=hunter22&user=bob":      "postgresql://db/app?password=xxxxx&user=bob",
		"host=db user=bob password=hunter22 dbname=app":       "host=db user=bob password=xxxxx dbname=app",
		"host=db password='hunter 22' dbname=app":             "host=db password=xxxxx dbname=app",
		"postgres://bob:hun@ter22@db:bad/app":                 "postgres://bob:xxxxx@db:bad/app",
		"":                                                    "",
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSecrets(t *testing.T) {
	t.Setenv("PGPASSWORD", "from-env-pw")
	got := strings.Join(Secrets("postgres://bob:sp%40c%2Fal@db/app?sslpassword=keypass"), " ")
	for _, want := range []string{"sp%40c%2Fal", "sp@c/al", "keypass", "from-env-pw"} {
		if !strings.Contains(got, want) {
			t.Errorf("Secrets lacks %q: %s", want, got)
		}
	}
	got = strings.Join(Secrets("postgres://bob:sp@c/al:pw?x#S3cr3t@host/db"), " ")
	if !strings.Contains(got, "sp@c/al:pw?x#S3cr3t") {
		t.Errorf("malformed URL: Secrets = %s", got)
	}
}

func TestScrubber(t *testing.T) {
	var s Scrubber
	s.Add("hunter22", "", "ab")
	var buf bytes.Buffer
	w := s.Writer(&buf)
	n, err := w.Write([]byte("failed: hunter22 at postgres://bob:other@db/x, password=zzz, ab"))
	if err != nil || n != 63 {
		t.Fatalf("Write = %d, %v", n, err)
	}
	if got, want := buf.String(), "failed: xxxxx at postgres://bob:xxxxx@db/x, password=xxxxx ab"; got != want {
		t.Fatalf("scrubbed %q, want %q", got, want)
	}
}

func TestDescribeSaysWhereSettingsCameFrom(t *testing.T) {
	for _, v := range libpqVars {
		t.Setenv(v, "")
	}
	if got := Describe(FromLibpqEnv); !strings.Contains(got, "libpq defaults") {
		t.Errorf("no PG* variable set: Describe = %q, want it to say libpq defaults", got)
	}
	t.Setenv("PGHOST", "db.example")
	t.Setenv("PGPASSWORD", "hunter22")
	got := Describe(FromLibpqEnv)
	if !strings.Contains(got, "PGHOST") || !strings.Contains(got, "PGPASSWORD") {
		t.Errorf("Describe = %q, want it to name PGHOST and PGPASSWORD", got)
	}
	if strings.Contains(got, "hunter22") || strings.Contains(got, "db.example") {
		t.Errorf("Describe = %q prints a value", got)
	}
	if got := Describe(FromFlag); got != string(FromFlag) {
		t.Errorf("Describe(FromFlag) = %q", got)
	}
}

// Tokens masks a secret only where no letter or digit touches it.
func TestScrubberTokens(t *testing.T) {
	s := &Scrubber{}
	s.Add("1759", "pwx")
	for in, want := range map[string]string{
		"fence 17592186044417":         "fence 17592186044417",
		"1759":                         Mask,
		"key k-1759, owner 1759":       "key k-" + Mask + ", owner " + Mask,
		"a17591759":                    "a17591759",
		"(1759)17591":                  "(" + Mask + ")17591",
		"é1759 1759é 1759":             "é1759 1759é " + Mask,
		"pwx pwxd pwx":                 Mask + " pwxd " + Mask,
		"postgres://u:secret@h/db":     "postgres://u:" + Mask + "@h/db",
		"no secrets here at all 1758 ": "no secrets here at all 1758 ",
	} {
		if got := s.Tokens(in); got != want {
			t.Errorf("Tokens(%q) = %q, want %q", in, got, want)
		}
	}
}
