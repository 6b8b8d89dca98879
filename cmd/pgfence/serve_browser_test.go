package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/pgfence/pgfence/internal/testsupport/needtool"
	"github.com/pgfence/pgfence/internal/testsupport/pgtest"
	"github.com/pgfence/pgfence/pglease"
)

// browserPath finds the Chromium the page test drives: $PGFENCE_CHROMIUM,
// else Debian's /usr/bin/chromium, else chromium or google-chrome on PATH.
// No browser (PGFENCE_CHROMIUM naming a missing binary included) skips the
// test loudly, or fails it when PGFENCE_REQUIRE_CHROMIUM is set, as CI does.
func browserPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("PGFENCE_CHROMIUM"); p != "" {
		found, err := exec.LookPath(p)
		if err != nil {
			needtool.Chromium.Missing(t, fmt.Errorf("PGFENCE_CHROMIUM=%s: %w", p, err))
		}
		return found
	}
	if _, err := os.Stat("/usr/bin/chromium"); err == nil {
		return "/usr/bin/chromium"
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	needtool.Chromium.Missing(t, errors.New("no /usr/bin/chromium, and no chromium, chromium-browser or google-chrome on PATH"))
	return ""
}

// openPage loads url in headless Chromium and returns a context that ends
// with the test (and within 2 minutes), and the browser's, on the loaded
// page.
func openPage(t *testing.T, chromium, url string) (ctx, browser context.Context) {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(cancelAlloc)
	browser, cancelBrowser := chromedp.NewContext(allocCtx)
	t.Cleanup(cancelBrowser)
	if err := chromedp.Do(browser,
		chromedp.Navigate(url),
		chromedp.WaitReady(chromedp.ID("leases")),
	); err != nil {
		t.Fatalf("load the page in %s: %v", chromium, err)
	}
	return ctx, browser
}

// leaseRow is what the page's lease table shows for the test's key.
const leaseRowJS = `(() => {
  const r = [...document.querySelectorAll("#leases tr")].find((tr) => tr.dataset.key === %q);
  return r ? [r.querySelector(".owner").textContent, r.querySelector(".fence").textContent, r.querySelector(".left").textContent].join("|") : "";
})()`

// TestServePageInBrowser loads the live page in headless Chromium, takes a
// lease and waits until the page shows it (key, holder, fence), releases it
// and waits until the page shows it gone, and checks that the page updated
// in place: a value set when it loaded survives throughout.
func TestServePageInBrowser(t *testing.T) {
	t.Parallel()
	chromium := browserPath(t)
	db, pool := serveDatabase(t)
	s := startServe(t, db, "--doctor-interval", "5s")

	ctx, browser := openPage(t, chromium, s.base+"/")
	loadedAt, err := chromedp.Run(browser, chromedp.Evaluate[float64](`window.pgfenceLoadedAt`))
	if err != nil {
		t.Fatal(err)
	}
	if loadedAt == 0 {
		t.Fatal("the page's script did not run (window.pgfenceLoadedAt unset)")
	}

	// waitPage polls the page (not the server) until the lease row reads
	// as want says.
	waitPage := func(t *testing.T, what string, want func(row string) bool) string {
		t.Helper()
		var row string
		eventually(t, "the page shows "+what, func() string {
			var err error
			row, err = chromedp.Run(browser, chromedp.Evaluate[string](fmt.Sprintf(leaseRowJS, "serve/page-key")))
			if err != nil {
				return err.Error()
			}
			if !want(row) {
				return fmt.Sprintf("lease row %q", row)
			}
			return ""
		})
		return row
	}

	pgtest.Step(t, "no lease yet", func(t *testing.T) {
		waitPage(t, "no lease yet", func(row string) bool { return row == "" })
	})

	c, err := pglease.New(pool, pglease.WithOwner("page-holder"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.TryAcquire(ctx, "serve/page-key", time.Minute)
	if err != nil {
		t.Fatal(err)
	}

	pgtest.Step(t, "a new lease shows with holder and fence", func(t *testing.T) {
		prefix := fmt.Sprintf("page-holder|%d|", l.Fence())
		row := waitPage(t, "the lease with holder and fence", func(row string) bool {
			return len(row) > len(prefix) && row[:len(prefix)] == prefix
		})
		t.Logf("the page shows %q", row)
	})

	pgtest.Step(t, "a released lease goes away", func(t *testing.T) {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		waitPage(t, "the lease gone", func(row string) bool { return row == "" })
	})

	pgtest.Step(t, "a semaphore's holders and a fair waiter show", func(t *testing.T) {
		p, err := c.TryAcquire(ctx, "serve/page-sem", time.Minute, pglease.Permits(2))
		if err != nil {
			t.Fatal(err)
		}
		defer p.Release(ctx)
		h, err := c.TryAcquire(ctx, "serve/page-key", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		defer h.Release(ctx)
		fc, err := pglease.New(pool, pglease.WithOwner("page-waiter"), pglease.WithFairWaiting())
		if err != nil {
			t.Fatal(err)
		}
		defer fc.Close()
		wctx, stop := context.WithCancel(ctx)
		waited := make(chan struct{})
		go func() { defer close(waited); fc.Acquire(wctx, "serve/page-key", time.Minute) }()
		defer func() { stop(); <-waited }()
		want := fmt.Sprintf("serve/page-sem|1 of 2|0: page-holder, %d#serve/page-key|exclusive|0|page-waiter", p.Fence())
		eventually(t, "the page shows the permit and the waiter", func() string {
			got, err := chromedp.Run(browser, chromedp.Evaluate[string](`(() => {
  const p = [...document.querySelectorAll("#permits tr")].find((tr) => tr.dataset.key === "serve/page-sem");
  const w = [...document.querySelectorAll("#waiters tr")].find((tr) => tr.dataset.key === "serve/page-key");
  return (p ? [p.querySelector(".key").textContent, p.querySelector(".held").textContent, p.querySelector(".holders").textContent].join("|") : "") + "#" +
    (w ? [w.querySelector(".key").textContent, w.querySelector(".kind").textContent, w.querySelector(".position").textContent, w.querySelector(".owner").textContent].join("|") : "");
})()`))
			if err != nil {
				return err.Error()
			}
			if got != want {
				return fmt.Sprintf("page shows %q, want %q", got, want)
			}
			return ""
		})
	})

	pgtest.Step(t, "the doctor's findings show, escaped", func(t *testing.T) {
		// A waiter whose key is markup: the queues finding reads it, and the
		// page must show it as text, never as an element.
		const markup = `<img id="doctor-xss" src="x" onerror="window.pgfenceXSS=1">`
		if _, err := pool.Exec(ctx, `INSERT INTO pgfence_waiters (lock_key, owner_token, owner, ticket, expires_at) VALUES ($1, 'doctor-page', 'x', 1, 'infinity')`, markup); err != nil {
			t.Fatal(err)
		}
		defer pool.Exec(ctx, `DELETE FROM pgfence_waiters WHERE owner_token = 'doctor-page'`)
		eventually(t, "the page shows the doctor's findings", func() string {
			got, err := chromedp.Run(browser, chromedp.Evaluate[string](`(() => {
  const row = (c) => document.querySelector('#doctor tr[data-check="' + c + '"]');
  const s = row("server"), q = row("queues");
  return [s ? s.querySelector(".status").textContent : "", s ? s.querySelector(".title").textContent : "",
    q ? q.querySelector(".read").textContent : "", String(document.getElementById("doctor-xss") === null && !window.pgfenceXSS),
    document.getElementById("doctor-summary").textContent].join("|");
})()`))
			if err != nil {
				return err.Error()
			}
			parts := strings.Split(got, "|")
			if len(parts) != 5 || parts[0] != "ok" || !strings.HasPrefix(parts[1], "PostgreSQL ") || !strings.Contains(parts[2], markup) ||
				parts[3] != "true" || !strings.Contains(parts[4], " ok, ") {
				return fmt.Sprintf("page shows %q", got)
			}
			return ""
		})
	})

	pgtest.Step(t, "the page updated itself without reloading", func(t *testing.T) {
		loadedAtAfter, err := chromedp.Run(browser, chromedp.Evaluate[float64](`window.pgfenceLoadedAt`))
		if err != nil {
			t.Fatal(err)
		}
		updates, err := chromedp.Run(browser, chromedp.Evaluate[float64](`window.pgfenceUpdates`))
		if err != nil {
			t.Fatal(err)
		}
		if loadedAtAfter != loadedAt {
			t.Errorf("the page was reloaded: loaded at %v, then at %v", loadedAt, loadedAtAfter)
		}
		if updates < 2 {
			t.Errorf("the page updated itself %v times", updates)
		}
	})
}
