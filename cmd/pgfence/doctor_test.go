package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgfence/pgfence/internal/testsupport/dbenv"
	"github.com/pgfence/pgfence/internal/testsupport/needtool"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
)

// doctorJSON runs doctor --json and parses its output.
func doctorJSON(t *testing.T, env []string, args ...string) (doctorReport, result) {
	t.Helper()
	r := pgfence(t, env, append([]string{"doctor", "--json"}, args...)...)
	var rep doctorReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("doctor --json: %v\n%s", err, r)
	}
	return rep, r
}

// findingsOf returns the findings of check.
func findingsOf(rep doctorReport, check string) []finding {
	var out []finding
	for _, f := range rep.Findings {
		if f.Check == check {
			out = append(out, f)
		}
	}
	return out
}

// oneFinding returns the one finding of check, failing the test without it.
func oneFinding(t *testing.T, rep doctorReport, r result, check string) finding {
	t.Helper()
	fs := findingsOf(rep, check)
	if len(fs) != 1 {
		t.Fatalf("want one %s finding, got %d:\n%s", check, len(fs), r)
	}
	return fs[0]
}

// sameInText checks that the text output carries every finding of rep
// with its status, and the same counts.
func sameInText(t *testing.T, rep doctorReport, text result) {
	t.Helper()
	for _, f := range rep.Findings {
		if line := fmt.Sprintf("%-5s %-12s %s\n", f.Status, f.Check, f.Title); !strings.Contains(text.stdout, line) {
			t.Errorf("the text output lacks %q", line)
		}
	}
	if sum := fmt.Sprintf("%d ok, %d warn, %d fail: %s", rep.Counts["ok"], rep.Counts["warn"], rep.Counts["fail"], rep.Status); !strings.Contains(text.stdout, sum) {
		t.Errorf("the text output lacks %q", sum)
	}
	if t.Failed() {
		t.Fatalf("text:\n%s", text)
	}
}

// A direct connection to a sound, migrated throwaway server: every
// finding ok, exit 0, and --json carries the same findings as the text.
func TestDoctorDirect(t *testing.T) {
	t.Parallel()
	db := durableServer(t)
	wantCode(t, pgfence(t, nil, "migrate", "up", "--database-url", db), exitOK)
	rep, r := doctorJSON(t, nil, "--database-url", db)
	wantCode(t, r, exitOK)
	for _, f := range rep.Findings {
		if f.Status != statusOK {
			t.Errorf("%s: %s %q (read %q, do %q)", f.Check, f.Status, f.Title, f.Read, f.Do)
		}
	}
	for _, check := range []string{"server", "pooler", "schema", "durability", "replication", "privileges", "sweep", "leases", "queues", "tombstones"} {
		oneFinding(t, rep, r, check)
	}
	if rep.Status != statusOK || rep.Counts["ok"] != len(rep.Findings) {
		t.Fatalf("status %s, counts %v\n%s", rep.Status, rep.Counts, r)
	}
	text := pgfence(t, []string{"DATABASE_URL=" + db}, "doctor")
	wantCode(t, text, exitOK)
	sameInText(t, rep, text)
	if !strings.Contains(text.stdout, "from DATABASE_URL") {
		t.Fatalf("the text does not say where the database came from:\n%s", text)
	}
}

// Through PgBouncer in transaction mode: the pooler finding warns, naming
// the pooler and what needs a setting, and doctor exits 1.
func TestDoctorBouncer(t *testing.T) {
	t.Parallel()
	db := migratedDatabase(t)
	u, err := url.Parse(pgtest.BouncerURL(t))
	if err != nil {
		t.Fatal(err)
	}
	dbURL, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = dbURL.Path // the bouncer fronts every database of the server
	rep, r := doctorJSON(t, nil, "--database-url", u.String())
	wantCode(t, r, exitFailed)
	f := oneFinding(t, rep, r, "pooler")
	if f.Status != statusWarn || !strings.Contains(f.Title, "transaction pooler") {
		t.Fatalf("pooler finding %+v\n%s", f, r)
	}
	for _, want := range []string{"need a listen pool", "migrations need a direct connection", "advisory.SessionLock", "docs/pgbouncer.md"} {
		if !strings.Contains(f.Do, want) {
			t.Errorf("the pooler finding's advice lacks %q: %q", want, f.Do)
		}
	}
	for _, f := range rep.Findings {
		if f.Check != "pooler" && f.Status != statusOK && !fastTestServer(f) {
			t.Errorf("%s: %s %q (read %q)", f.Check, f.Status, f.Title, f.Read)
		}
	}
	text := pgfence(t, nil, "doctor", "--database-url", u.String())
	wantCode(t, text, exitFailed)
	sameInText(t, rep, text)
}

// A LOGIN role with no grants on pgfence's schema: the privileges finding
// fails naming the GRANT to run, doctor exits 2, and the role's password is
// never printed.
func TestDoctorNoGrants(t *testing.T) {
	t.Parallel()
	const password = "pw-D0ct0r-n0-gr4nts"
	ctx := context.Background()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	role := randomName("pgfence_doctor_")
	q := pgx.Identifier{role}.Sanitize()
	if _, err := pool.Exec(ctx, "CREATE ROLE "+q+" LOGIN PASSWORD '"+password+"'"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Exec(ctx, "DROP ROLE "+q) })
	db := withUser(t, pgtest.URL(), role, password)

	rep, r := doctorJSON(t, nil, "--database-url", db, "--schema", schema)
	wantCode(t, r, 2)
	f := oneFinding(t, rep, r, "privileges")
	if f.Status != statusFail || !strings.Contains(f.Title, "no USAGE") || !strings.Contains(f.Do, "GRANT") || !strings.Contains(f.Do, q) {
		t.Fatalf("privileges finding %+v\n%s", f, r)
	}
	text := pgfence(t, nil, "doctor", "--database-url", db, "--schema", schema)
	wantCode(t, text, 2)
	for _, out := range []result{r, text} {
		if strings.Contains(out.stdout+out.stderr, password) {
			t.Fatalf("the password was printed:\n%s", out)
		}
	}

	// The GRANT named (the schema-level one, where the client role does not
	// exist yet) makes the finding pass the USAGE rule.
	if _, err := pool.Exec(ctx, "GRANT USAGE ON SCHEMA "+pgx.Identifier{schema}.Sanitize()+" TO "+q); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Exec(ctx, "REVOKE ALL ON SCHEMA "+pgx.Identifier{schema}.Sanitize()+" FROM "+q) })
	rep, r = doctorJSON(t, nil, "--database-url", db, "--schema", schema)
	if f := oneFinding(t, rep, r, "privileges"); strings.Contains(f.Title, "no USAGE") || f.Status == statusOK {
		t.Fatalf("after GRANT USAGE: %+v\n%s", f, r)
	}
}

// --table: a table without the fencing trigger fails with the SQL that
// installs it; that SQL, run, makes it ok; disabled, it fails again with
// the ALTER TABLE that enables it.
func TestDoctorTrigger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := migratedDatabase(t)
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE SCHEMA app; CREATE TABLE app."Accounts" (id int PRIMARY KEY, balance int)`); err != nil {
		t.Fatal(err)
	}
	trigger := func(t *testing.T, want doctorStatus, code int) finding {
		t.Helper()
		rep, r := doctorJSON(t, nil, "--database-url", db, "--table", "app.Accounts")
		if code == exitOK && fastTestServer(oneFinding(t, rep, r, "durability")) {
			code = exitFailed
		}
		wantCode(t, r, code)
		f := oneFinding(t, rep, r, "trigger")
		if f.Status != want {
			t.Fatalf("trigger finding %+v, want %s\n%s", f, want, r)
		}
		return f
	}

	var fix string
	pgtest.Step(t, "no trigger: fail, with the SQL that installs it", func(t *testing.T) {
		f := trigger(t, statusFail, 2)
		_, sql, ok := strings.Cut(f.Do, "or in SQL:\n")
		if !strings.Contains(f.Do, `pgguard.InstallTrigger(ctx, pool, pgguard.Table{Schema: "app", Name: "Accounts"}`) || !ok ||
			!strings.Contains(sql, "ADD COLUMN IF NOT EXISTS \"last_fence\"") || !strings.Contains(sql, "CREATE TRIGGER pgfence_fence_guard") {
			t.Fatalf("the finding does not say how to install the trigger: %q", f.Do)
		}
		fix = sql
	})
	pgtest.Step(t, "the SQL run: ok", func(t *testing.T) {
		if _, err := conn.Exec(ctx, fix); err != nil {
			t.Fatalf("%s: %v", fix, err)
		}
		f := trigger(t, statusOK, exitOK)
		if !strings.Contains(f.Title, "strict mode") {
			t.Fatalf("trigger finding %+v", f)
		}
	})
	pgtest.Step(t, "disabled: fail, with the ALTER TABLE that enables it", func(t *testing.T) {
		if _, err := conn.Exec(ctx, `ALTER TABLE app."Accounts" DISABLE TRIGGER pgfence_fence_guard`); err != nil {
			t.Fatal(err)
		}
		f := trigger(t, statusFail, 2)
		if !strings.Contains(f.Title, "disabled") || f.Do != `ALTER TABLE "app"."Accounts" ENABLE TRIGGER pgfence_fence_guard` {
			t.Fatalf("trigger finding %+v", f)
		}
	})
	pgtest.Step(t, "a table that does not exist: fail", func(t *testing.T) {
		rep, r := doctorJSON(t, nil, "--database-url", db, "--table", "app.nope")
		wantCode(t, r, 2)
		if f := oneFinding(t, rep, r, "trigger"); !strings.Contains(f.Title, "does not exist") {
			t.Fatalf("trigger finding %+v", f)
		}
	})
}

// Rows no pgfence client writes (infinite and far expiries, a 512-byte
// key, escape sequences) are read, counted and shown escaped: the leases
// that never expire warn, nothing fails.
func TestDoctorOddRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := migratedDatabase(t)
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `INSERT INTO lock_leases (lock_key, owner, owner_token, fence, acquired_at, expires_at) VALUES
	  ('forever', 'o1', 't1', 1, now() - interval '3 days', 'infinity'),
	  (repeat('k', 512), 'o2', 't2', 2, '-infinity', '-infinity'),
	  (E'esc\x1b[31mred', E'own\x1b]0;x\x07', 't3', 3, now() - interval '5 hours', now() - interval '4 hours'),
	  ('far', 'o4', 't4', 4, now(), now() + interval '1000 years');
	  INSERT INTO pgfence_abandoned_tokens (owner_token, abandoned_at) VALUES ('old', now() - interval '3 hours'), ('inf', '-infinity');
	  INSERT INTO pgfence_waiters (lock_key, owner_token, owner, ticket, expires_at) VALUES
	    (repeat('w', 512), 'w1', 'x', 1, 'infinity'), (repeat('w', 512), 'w2', 'y', 2, 'infinity'), ('q', 'w3', 'z', 3, now() + interval '1 minute')`)
	if err != nil {
		t.Fatal(err)
	}
	rep, r := doctorJSON(t, nil, "--database-url", db)
	wantCode(t, r, exitFailed)
	want := map[string]doctorStatus{"leases": statusWarn, "tombstones": statusWarn, "sweep": statusOK, "queues": statusOK}
	for check, status := range want {
		if f := oneFinding(t, rep, r, check); f.Status != status {
			t.Errorf("%s: %s, want %s: %+v", check, f.Status, status, f)
		}
	}
	if f := oneFinding(t, rep, r, "leases"); !strings.Contains(f.Title, "2 leases expire beyond") || !strings.Contains(f.Read, "the oldest held: forever by o1") {
		t.Errorf("leases: %+v", f)
	}
	if f := oneFinding(t, rep, r, "sweep"); !strings.Contains(f.Read, "2 of them over 1 h ago, the oldest expired 292 years or more ago") {
		t.Errorf("sweep: %+v", f)
	}
	if f := oneFinding(t, rep, r, "queues"); !strings.Contains(f.Title, "3 waiters in the queues of 2 keys") || !strings.Contains(f.Read, "www...: 2, q: 1") {
		t.Errorf("queues: %+v", f)
	}
	text := pgfence(t, nil, "doctor", "--database-url", db)
	wantCode(t, text, exitFailed)
	sameInText(t, rep, text)
	if strings.ContainsAny(text.stdout, "\x1b\x07") {
		t.Fatalf("a control character reached the terminal:\n%q", text.stdout)
	}
	if t.Failed() {
		t.Log(r)
	}
}

func TestDoctorUsageAndConnection(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"doctor", "extra"}, exitUsage, "unexpected argument"},
		{[]string{"doctor", "--table", "a.b.c"}, exitUsage, "SCHEMA.TABLE"},
		{[]string{"doctor", "--patroni", "ftp://x"}, exitUsage, "--patroni wants"},
		{[]string{"doctor", "--database-url", "postgres://u:secret@127.0.0.1:1/db?connect_timeout=2"}, exitUnreachable, "cannot reach"},
		{[]string{"doctor", "-h"}, exitOK, "Exit codes"},
	} {
		r := pgfence(t, nil, tc.args...)
		if r.code != tc.code || !strings.Contains(r.stdout+r.stderr, tc.want) {
			t.Errorf("pgfence %v: want exit %d and %q, got %s", tc.args, tc.code, tc.want, r)
		}
		if strings.Contains(r.stdout+r.stderr, "secret") {
			t.Errorf("pgfence %v printed the password:\n%s", tc.args, r)
		}
	}
	if r := pgfence(t, nil, "--help"); !strings.Contains(r.stdout, "doctor ") {
		t.Errorf("the help does not list doctor:\n%s", r)
	}
}

// The privilege rules, in their order: the first that holds decides.
func TestDoctorPrivilegeRules(t *testing.T) {
	judge := func(f privilegeFacts) (doctorStatus, string) {
		for _, r := range privilegeRules {
			if r.when(f) {
				do := ""
				if r.do != nil {
					do = r.do(f)
				}
				return r.status, do
			}
		}
		t.Fatalf("no rule for %+v", f)
		return "", ""
	}
	base := privilegeFacts{role: "app", schema: "pgfence", owner: "admin"}
	for _, tc := range []struct {
		name   string
		change func(*privilegeFacts)
		status doctorStatus
		do     string
	}{
		{"superuser", func(f *privilegeFacts) { f.superuser = true }, statusOK, ""},
		{"owner", func(f *privilegeFacts) { f.owns, f.usage = true, true }, statusOK, ""},
		{"member", func(f *privilegeFacts) { f.clientExists, f.member, f.usage = true, true, true }, statusOK, ""},
		{"no usage, client role there", func(f *privilegeFacts) { f.clientExists = true }, statusFail, `GRANT pgfence_client TO "app"`},
		{"no usage, no client role", func(f *privilegeFacts) {}, statusFail, `GRANT USAGE ON SCHEMA "pgfence" TO "app"`},
		{"usage, no client role", func(f *privilegeFacts) { f.usage = true }, statusWarn, "pgfence migrate up"},
		{"usage, not a member", func(f *privilegeFacts) { f.usage, f.clientExists = true, true }, statusFail, `GRANT pgfence_client TO "app"`},
	} {
		f := base
		tc.change(&f)
		status, do := judge(f)
		if status != tc.status || !strings.Contains(do, tc.do) {
			t.Errorf("%s: %s %q, want %s and %q", tc.name, status, do, tc.status, tc.do)
		}
	}
}

// serve's /api/doctor carries the same findings as doctor --json, and
// --doctor-interval is bounded.
func TestServeDoctor(t *testing.T) {
	t.Parallel()
	db := migratedDatabase(t)
	want, r := doctorJSON(t, nil, "--database-url", db)
	if r.code != exitOK && r.code != exitFailed { // the shared test cluster's fsync warns
		t.Fatalf("doctor: %s", r)
	}
	s := startServe(t, db)
	var got doctorState
	eventually(t, "/api/doctor has a report", func() string {
		code, body := s.get(t, "/api/doctor")
		if code != 200 {
			return fmt.Sprintf("status %d: %s", code, body)
		}
		if err := json.Unmarshal([]byte(body), &got); err != nil {
			return err.Error()
		}
		if got.Report == nil || !got.OK {
			return body
		}
		return ""
	})
	if len(got.Report.Findings) != len(want.Findings) {
		t.Fatalf("/api/doctor has %d findings, doctor --json %d", len(got.Report.Findings), len(want.Findings))
	}
	for i, f := range want.Findings {
		if g := got.Report.Findings[i]; g.Check != f.Check || g.Status != f.Status {
			t.Errorf("finding %d: /api/doctor %s %s, doctor --json %s %s", i, g.Check, g.Status, f.Check, f.Status)
		}
	}
	r = pgfence(t, nil, "serve", "--database-url", db, "--doctor-interval", "1s")
	if r.code != exitUsage || !strings.Contains(r.stderr, "--doctor-interval") {
		t.Fatalf("a short --doctor-interval: %s", r)
	}
}

// The replication verdicts on what PostgreSQL and Patroni report; the
// failover suite (hasuite) runs the asynchronous and the strict ones on a
// real Patroni cluster.
func TestDoctorReplicationJudge(t *testing.T) {
	s := func(v string) *string { return &v }
	async := []standby{{"n1", s("streaming"), s("async")}, {"n2", s("streaming"), s("async")}}
	oneSync := []standby{{"n1", s("streaming"), s("sync")}, {"n2", s("streaming"), s("async")}}
	hidden := []standby{{"n1", nil, nil}}
	for _, tc := range []struct {
		name   string
		facts  replicationFacts
		status doctorStatus
		want   string
	}{
		{"single server", replicationFacts{}, statusOK, "single server"},
		{"names set, no standby", replicationFacts{syncNames: "*"}, statusFail, "every commit waits"},
		{"async standbys", replicationFacts{standbys: async}, statusWarn, "synchronous_mode_strict: true"},
		{"names set, none sync", replicationFacts{syncNames: "n9", standbys: async}, statusWarn, "synchronous_mode_strict: true"},
		{"sync_state hidden", replicationFacts{syncNames: "n1", standbys: hidden}, statusWarn, "pg_monitor"},
		{"one sync", replicationFacts{syncNames: "n1", standbys: oneSync}, statusOK, "--patroni"},
		{"patroni async", replicationFacts{standbys: async, patroni: &patroniView{}}, statusWarn, "synchronous_mode_strict: true"},
		{"patroni not strict", replicationFacts{syncNames: "n1", standbys: oneSync, patroni: &patroniView{syncMode: true, syncMembers: 1}}, statusWarn, "synchronous_mode_strict: true"},
		{"patroni strict, no sync member", replicationFacts{syncNames: "*", patroni: &patroniView{syncMode: true, strict: true}}, statusFail, "every commit waits"},
		{"patroni strict", replicationFacts{syncNames: "n1", standbys: oneSync, patroni: &patroniView{syncMode: true, strict: true, syncMembers: 1}}, statusOK, "strict"},
	} {
		f := tc.facts.judge(false)
		if f.Status != tc.status || !strings.Contains(f.Title+" "+f.Do, tc.want) {
			t.Errorf("%s: %s %q (do %q), want %s and %q", tc.name, f.Status, f.Title, f.Do, tc.status, tc.want)
		}
	}
}

// A --patroni that does not answer fails the replication finding, without
// printing the URL's password.
func TestDoctorPatroniUnreachable(t *testing.T) {
	t.Parallel()
	db := migratedDatabase(t)
	rep, r := doctorJSON(t, nil, "--database-url", db, "--patroni", "http://admin:pw-P4tr0n1@127.0.0.1:1")
	wantCode(t, r, 2)
	if f := oneFinding(t, rep, r, "replication"); f.Status != statusFail || !strings.Contains(f.Title, "Patroni") || !strings.Contains(f.Read, "127.0.0.1:1/config") {
		t.Fatalf("replication finding %+v\n%s", f, r)
	}
	if strings.Contains(r.stdout+r.stderr, "pw-P4tr0n1") {
		t.Fatalf("the Patroni password was printed:\n%s", r)
	}
}

// fastTestServer reports whether f is the durability finding's warning
// about fsync, which the shared test cluster earns: it runs with fsync off
// for speed (TestDoctorDirect runs on a durable server of its own).
func fastTestServer(f finding) bool {
	return f.Check == "durability" && f.Status == statusWarn && strings.Contains(f.Read, "fsync = off")
}

// durableServer starts a cluster of its own with fsync and full_page_writes
// on (the shared test cluster runs with both off, for speed), or as fsync
// says, and returns the URL of its postgres database.
func durableServer(t *testing.T, fsync ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The port only names the socket file, in a directory of the cluster's own.
	cl, err := dbenv.NewCluster(5450)
	if err != nil {
		needtool.Server.Missing(t, err)
	}
	t.Cleanup(func() { cl.Remove() })
	if err := cl.InitDB(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cl.Start(ctx, nil, append([]string{"fsync=on", "full_page_writes=on"}, fsync...)...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Stop() })
	return cl.URL("postgres")
}

// A server whose flushes are not durable: the durability finding warns,
// naming fsync, and doctor exits 1.
func TestDoctorFsyncOff(t *testing.T) {
	t.Parallel()
	db := durableServer(t, "fsync=off")
	wantCode(t, pgfence(t, nil, "migrate", "up", "--database-url", db), exitOK)
	rep, r := doctorJSON(t, nil, "--database-url", db)
	wantCode(t, r, exitFailed)
	f := oneFinding(t, rep, r, "durability")
	if f.Status != statusWarn || !strings.Contains(f.Title, "fsync") || !strings.Contains(f.Do, "fsync = on") {
		t.Fatalf("durability = %+v, want a warning naming fsync and how to turn it on\n%s", f, r)
	}
}

// Run as the documented service role, a member of pgfence_client only:
// the privileges are ok, and the tombstones it may not read (by design)
// are no warning.
func TestDoctorClientRole(t *testing.T) {
	t.Parallel()
	r := pgtest.ClientRoles(t)
	rep, res := doctorJSON(t, nil, "--database-url", r.AppURL, "--schema", r.Schema)
	if f := oneFinding(t, rep, res, "privileges"); f.Status != statusOK || !strings.Contains(f.Title, "member of pgfence_client") {
		t.Fatalf("privileges = %+v\n%s", f, res)
	}
	if f := oneFinding(t, rep, res, "tombstones"); f.Status != statusOK || !strings.Contains(f.Do, "owner") {
		t.Fatalf("tombstones = %+v\n%s", f, res)
	}
	for _, f := range rep.Findings {
		if f.Status != statusOK && !fastTestServer(f) {
			t.Errorf("%s: %s %q (read %q)", f.Check, f.Status, f.Title, f.Read)
		}
	}
}
