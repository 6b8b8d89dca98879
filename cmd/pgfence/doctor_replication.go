package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/pgfence/pgfence/cmd/pgfence/internal/oddrow"
)

// zombieAdvice is docs/failover.md's first item: what makes a paused
// ("zombie") primary harmless.
const zombieAdvice = "synchronous replication, strict: with Patroni, patronictl edit-config and set " +
	"synchronous_mode: true and synchronous_mode_strict: true (no falling back to asynchronous when the standby is gone); " +
	"without Patroni, synchronous_standby_names naming the standbys and synchronous_commit = on; docs/failover.md, What to run, in order"

// standby is a row of pg_stat_replication. Its state and sync_state are
// NULL for a role that may not read them (pg_read_all_stats).
type standby struct {
	name             string
	state, syncState *string
}

func (s standby) String() string {
	name, _ := oddrow.Text(s.name)
	state, sync := "?", "?"
	if s.state != nil {
		state = *s.state
	}
	if s.syncState != nil {
		sync = *s.syncState
	}
	return fmt.Sprintf("%s (%s, %s)", name, state, sync)
}

// replicationFacts is what the replication finding is judged from.
type replicationFacts struct {
	syncNames string
	standbys  []standby
	patroni   *patroniView // nil without --patroni
}

func (r replicationFacts) read() string {
	names := make([]string, len(r.standbys))
	for i, s := range r.standbys {
		names[i] = s.String()
	}
	out := fmt.Sprintf("synchronous_standby_names = %q; %d standbys in pg_stat_replication", r.syncNames, len(r.standbys))
	if len(names) > 0 {
		out += ": " + strings.Join(names, ", ")
	}
	if r.patroni != nil {
		out += "; Patroni " + r.patroni.String()
	}
	return out
}

// syncStandbys counts the standbys PostgreSQL reports as synchronous, and
// those whose sync_state the role cannot see.
func (r replicationFacts) syncStandbys() (sync, unknown int) {
	for _, s := range r.standbys {
		switch {
		case s.syncState == nil:
			unknown++
		case *s.syncState == "sync" || *s.syncState == "quorum":
			sync++
		}
	}
	return sync, unknown
}

func checkReplication(ctx context.Context, d *doctor) error {
	var r replicationFacts
	if err := d.db().QueryRow(ctx, "SELECT current_setting('synchronous_standby_names')").Scan(&r.syncNames); err != nil {
		return d.readFailed("replication", "synchronous_standby_names", err)
	}
	rows, err := d.db().Query(ctx, "SELECT coalesce(application_name, ''), state, sync_state FROM pg_stat_replication ORDER BY application_name")
	if err != nil {
		return d.readFailed("replication", "pg_stat_replication", err)
	}
	for rows.Next() {
		var s standby
		if err := rows.Scan(&s.name, &s.state, &s.syncState); err != nil {
			rows.Close()
			return d.readFailed("replication", "pg_stat_replication", err)
		}
		r.standbys = append(r.standbys, s)
	}
	if err := rows.Err(); err != nil {
		return d.readFailed("replication", "pg_stat_replication", err)
	}
	if d.opts.patroni != "" {
		p, err := readPatroni(ctx, d.opts.patroni)
		if err != nil {
			d.add(finding{Check: "replication", Status: statusFail, Title: "could not read Patroni's REST API (--patroni)",
				Read: d.app.scrub.String(err.Error()),
				Do:   "give --patroni the REST API of a running node (patronictl list shows them), or leave it out to judge from PostgreSQL alone"})
			return nil
		}
		r.patroni = p
	}
	d.add(r.judge(d.standby))
	return nil
}

// judge says whether a failover can lose acknowledged grants: only
// synchronous replication, strict, rules it out (docs/failover.md).
func (r replicationFacts) judge(onStandby bool) finding {
	f := finding{Check: "replication", Read: r.read()}
	if r.patroni != nil {
		return r.judgePatroni(f)
	}
	sync, unknown := r.syncStandbys()
	switch {
	case onStandby:
		f.Status, f.Title = statusWarn, "connected to a standby: replication is judged on the primary"
		f.Do = "run pgfence doctor against the primary"
	case len(r.standbys) == 0 && r.syncNames == "":
		f.Status = statusOK
		f.Title = "a single server: no standby streams from it, so no failover and no zombie primary"
		f.Read += " (a managed service's replication out of PostgreSQL's sight, such as storage-level HA, is its provider's to vouch for)"
	case len(r.standbys) == 0:
		f.Status, f.Title = statusFail, "synchronous_standby_names is set but no standby is connected: every commit waits"
		f.Do = "bring a standby back (patronictl list shows the members), or clear synchronous_standby_names if this server is meant to stand alone"
	case r.syncNames == "":
		f.Status = statusWarn
		f.Title = "asynchronous standbys: after a failover, a paused (zombie) primary's acknowledged grants and writes are rewound away, fences repeat, two holders at once"
		f.Do = zombieAdvice
	case sync == 0 && unknown > 0:
		f.Status, f.Title = statusWarn, "the role cannot see the standbys' sync_state"
		f.Do = "GRANT pg_monitor (or pg_read_all_stats) TO the role, or run pgfence doctor as a superuser"
	case sync == 0:
		f.Status = statusWarn
		f.Title = "no standby is synchronous (all async or potential): a failover can lose acknowledged grants"
		f.Do = zombieAdvice
	default:
		f.Status = statusOK
		f.Title = fmt.Sprintf("synchronous replication: %d synchronous standby(s); whether it falls back to asynchronous when they go is Patroni's to say (--patroni URL)", sync)
	}
	return f
}

// judgePatroni judges from Patroni's configuration, which decides what
// PostgreSQL's settings become when a standby goes away.
func (r replicationFacts) judgePatroni(f finding) finding {
	p := r.patroni
	switch {
	case !p.syncMode:
		f.Status = statusWarn
		f.Title = "Patroni replicates asynchronously (synchronous_mode off): a zombie primary's acknowledged grants and writes are rewound away after a failover"
		f.Do = zombieAdvice
	case !p.strict:
		f.Status = statusWarn
		f.Title = "Patroni's synchronous_mode is not strict: when the standby goes, it falls back to asynchronous, and a zombie primary can acknowledge writes"
		f.Do = zombieAdvice
	case p.syncMembers == 0:
		f.Status = statusFail
		f.Title = "synchronous_mode_strict with no synchronous standby running: every commit waits"
		f.Do = "bring a replica back (patronictl list); docs/failover.md"
	default:
		f.Status = statusOK
		f.Title = "synchronous replication, strict (Patroni synchronous_mode and synchronous_mode_strict)"
	}
	return f
}

// patroniView is what doctor reads from Patroni's REST API: GET /config
// (the DCS's dynamic configuration) and GET /cluster (the members).
type patroniView struct {
	syncMode, strict bool
	members          []patroniMember
	syncMembers      int // running synchronous standbys
}

type patroniMember struct {
	Name  string `json:"name"`
	Role  string `json:"role"`
	State string `json:"state"`
}

func (p *patroniView) String() string {
	ms := make([]string, len(p.members))
	for i, m := range p.members {
		name, _ := oddrow.Text(m.Name)
		ms[i] = fmt.Sprintf("%s %s %s", name, m.Role, m.State)
	}
	return fmt.Sprintf("synchronous_mode %v, synchronous_mode_strict %v, members: %s", p.syncMode, p.strict, strings.Join(ms, "; "))
}

// patroniTimeout bounds each request: a paused Patroni does not answer.
const patroniTimeout = 5 * time.Second

func readPatroni(ctx context.Context, base string) (*patroniView, error) {
	var cfg struct {
		SyncMode any  `json:"synchronous_mode"` // a boolean, or "on"/"quorum"/"off" (Patroni 4)
		Strict   bool `json:"synchronous_mode_strict"`
	}
	if err := patroniGet(ctx, base, "/config", &cfg); err != nil {
		return nil, err
	}
	var cl struct {
		Members []patroniMember `json:"members"`
	}
	if err := patroniGet(ctx, base, "/cluster", &cl); err != nil {
		return nil, err
	}
	p := &patroniView{strict: cfg.Strict, members: cl.Members}
	switch v := cfg.SyncMode.(type) {
	case bool:
		p.syncMode = v
	case string:
		p.syncMode = v == "on" || v == "quorum" || v == "true"
	}
	for _, m := range cl.Members {
		if (m.Role == "sync_standby" || m.Role == "quorum_standby") && (m.State == "running" || m.State == "streaming") {
			p.syncMembers++
		}
	}
	return p, nil
}

// patroniGet decodes base+path's JSON into into. Its errors name the URL
// without its password.
func patroniGet(ctx context.Context, base, path string, into any) error {
	u, err := url.Parse(strings.TrimSuffix(base, "/") + path)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, patroniTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %v", u.Redacted(), unwrapURLError(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", u.Redacted(), resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
		return fmt.Errorf("GET %s: not Patroni's JSON: %v", u.Redacted(), err)
	}
	return nil
}

// unwrapURLError drops net/http's *url.Error wrapper, which quotes the
// whole URL, password included.
func unwrapURLError(err error) error {
	if ue, ok := err.(*url.Error); ok {
		return ue.Err
	}
	return err
}
