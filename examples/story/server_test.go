package story

import (
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestWithSetting: the added setting overrides the connection string's own,
// in a URL, in keyword/value form and in the empty string (libpq's
// environment), and the rest of the string is kept.
func TestWithSetting(t *testing.T) {
	for _, base := range []string{
		"postgres://u:p@h:5433/app?sslmode=disable",
		"postgres://u:p@h:5433/app?sslmode=disable&dbname=other",
		"host=h port=5433 user=u password=p dbname=app sslmode=disable",
		"",
	} {
		cfg, err := pgx.ParseConfig(withSetting(withSetting(base, "dbname", "pgfence_example_x"), "search_path", "it's"))
		if err != nil {
			t.Errorf("%q: %v", base, err)
			continue
		}
		if cfg.Database != "pgfence_example_x" || cfg.RuntimeParams["search_path"] != "it's" {
			t.Errorf("%q: database %q, search_path %q", base, cfg.Database, cfg.RuntimeParams["search_path"])
		}
		if base != "" && (cfg.Host != "h" || cfg.Port != 5433 || cfg.User != "u" || cfg.Password != "p") {
			t.Errorf("%q: lost host, port, user or password: %s", base, describe(cfg))
		}
	}
}
