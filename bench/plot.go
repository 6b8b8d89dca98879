package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// panel is one line chart: a series per contender, median rate against a
// count (clients or workers).
type panel struct {
	title, xlabel, ylabel string
	order                 []string
	log                   bool // rates spanning orders of magnitude
	series                map[string]map[int]float64
}

// rows2series takes the medians of the named contenders from lease rows,
// by client count.
func rows2series(rows []*leaseRow, names []string) map[string]map[int]float64 {
	out := map[string]map[int]float64{}
	for _, row := range rows {
		for _, n := range names {
			if s := row.rates[n]; len(s) > 0 {
				if out[n] == nil {
					out[n] = map[int]float64{}
				}
				out[n][row.clients] = s.median()
			}
		}
	}
	return out
}

// plotLines writes one panel as plot name.
func (r *report) plotLines(name, title, xlabel, ylabel string, order []string, series map[string]map[int]float64) error {
	return r.writePanels(name, []*panel{{title: title, xlabel: xlabel, ylabel: ylabel, order: order, series: series}})
}

// plotLeases: one panel per lease workload, log scale (Redis and the
// advisory lock run an order of magnitude above the rest).
func (r *report) plotLeases() error {
	var panels []*panel
	by := map[string][]*leaseRow{}
	var workloads []string
	for _, row := range r.leases {
		if by[row.workload] == nil {
			workloads = append(workloads, row.workload)
		}
		by[row.workload] = append(by[row.workload], row)
	}
	for _, w := range workloads {
		panels = append(panels, &panel{title: "leases, " + w, xlabel: "clients", ylabel: "acquire + release pairs/s (log)",
			order: leaseOrder, log: true, series: rows2series(by[w], leaseOrder)})
	}
	return r.writePanels("leases", panels)
}

// plotBouncer: lease pairs against clients and jobs against workers, per
// route.
func (r *report) plotBouncer() error {
	lp := &panel{title: "lease pairs, 10,000 keys", xlabel: "clients", ylabel: "pairs/s", order: []string{rDirect, rDirectDesc, rBouncer, rBouncerDesc}, series: map[string]map[int]float64{}}
	jp := &panel{title: fmt.Sprintf("claim.Runner, %s no-op jobs", num(float64(r.opts.jobs))), xlabel: "workers", ylabel: "jobs/s", order: lp.order, series: map[string]map[int]float64{}}
	for _, row := range r.bouncer {
		pn := lp
		if row.workload == "jobs" {
			pn = jp
		}
		for n, s := range row.rates {
			if pn.series[n] == nil {
				pn.series[n] = map[int]float64{}
			}
			pn.series[n][row.count] = s.median()
		}
	}
	return r.writePanels("pgbouncer", []*panel{lp, jp})
}

// plotHandoff: the median p50, p90 and p99 of each mode, as grouped bars.
func (r *report) plotHandoff() error {
	pl := plot.New()
	pl.Title.Text = fmt.Sprintf("hand-off, %d waiters on one key", r.opts.waiters)
	pl.Y.Label.Text = "release → next holder (ms)"
	pl.Legend.Top = true
	w := vg.Points(14)
	var names []string
	for _, h := range r.handoff {
		names = append(names, h.mode)
	}
	for i, q := range []struct {
		name string
		get  func(*handoffRow) sample
	}{{"p50", func(h *handoffRow) sample { return h.p50 }}, {"p90", func(h *handoffRow) sample { return h.p90 }}, {"p99", func(h *handoffRow) sample { return h.p99 }}} {
		vals := plotter.Values{}
		for _, h := range r.handoff {
			v := q.get(h)
			if len(v) == 0 {
				vals = append(vals, 0)
				continue
			}
			vals = append(vals, v.median())
		}
		bars, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return err
		}
		bars.Color = plotutil.Color(i)
		bars.LineStyle.Width = 0
		bars.Offset = w * vg.Length(i-1)
		pl.Add(bars)
		pl.Legend.Add(q.name, bars)
	}
	pl.NominalX(names...)
	pl.BackgroundColor = color.White
	return r.savePlots("handoff", []*plot.Plot{pl}, 9*vg.Inch)
}

// writePanels draws panels side by side into plot name.
func (r *report) writePanels(name string, panels []*panel) error {
	var row []*plot.Plot
	for _, pn := range panels {
		pl := plot.New()
		pl.Title.Text = pn.title
		pl.X.Label.Text = pn.xlabel
		pl.Y.Label.Text = pn.ylabel
		pl.Y.Min = 0
		xsSet := map[int]bool{}
		lo, hi := math.Inf(1), 0.0
		for _, ys := range pn.series {
			for x, y := range ys {
				xsSet[x] = true
				if y > 0 {
					lo, hi = math.Min(lo, y), math.Max(hi, y)
				}
			}
		}
		if hi == 0 {
			continue
		}
		if pn.log {
			pl.Y.Max = hi * 20 // room for the legend above the lines
			pl.Y.Scale = plot.LogScale{}
			pl.Y.Tick.Marker = plot.LogTicks{Prec: -1}
			pl.Y.Min = math.Pow(10, math.Floor(math.Log10(lo)))
		} else {
			pl.Y.Max = hi * 1.35
		}
		pl.Legend.Top = true
		pl.Legend.Left = true
		var xs []int
		for x := range xsSet {
			xs = append(xs, x)
		}
		sort.Ints(xs)
		var ticks []plot.Tick
		for _, x := range xs {
			ticks = append(ticks, plot.Tick{Value: float64(x), Label: fmt.Sprint(x)})
		}
		pl.X.Tick.Marker = plot.ConstantTicks(ticks)
		for i, n := range pn.order {
			pts := plotter.XYs{}
			for _, x := range xs {
				if y, ok := pn.series[n][x]; ok && (!pn.log || y > 0) {
					pts = append(pts, plotter.XY{X: float64(x), Y: y})
				}
			}
			if len(pts) == 0 {
				continue
			}
			line, points, err := plotter.NewLinePoints(pts)
			if err != nil {
				return err
			}
			c := plotutil.Color(i)
			line.Color, points.Color = c, c
			points.Shape = plotutil.Shape(i)
			if i == 0 {
				line.Width = vg.Points(2.5) // pgfence's figure, or the direct route
			}
			pl.Add(line, points)
			pl.Legend.Add(n, line, points)
		}
		pl.BackgroundColor = color.White
		row = append(row, pl)
	}
	if len(row) == 0 {
		return nil
	}
	return r.savePlots(name, row, 5*vg.Inch*vg.Length(len(row)))
}

// savePlots draws plots side by side, width wide, into plot name's PNG.
func (r *report) savePlots(name string, row []*plot.Plot, width vg.Length) error {
	img := vgimg.New(width, 4*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: len(row), PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 2, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align([][]*plot.Plot{row}, tiles, dc)
	for j, pl := range row {
		pl.Draw(canvases[0][j])
	}
	if err := os.MkdirAll(r.opts.plots, 0o755); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(r.opts.plots, name+".png"))
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
