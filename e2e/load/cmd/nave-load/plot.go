package main

import (
	"cmp"
	"fmt"
	"os"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/navemesh/nave/e2e/load"
)

// writePlot draws how the hub's cost grows in scenario: its CPU-seconds
// and peak RSS (medians) against what varied between the runs — the
// proxies, else the services — one line per ADS mode, side by side in one
// PNG at path.
func writePlot(path, scenario string, medians []load.Result) error {
	x, xLabel := func(r load.Result) float64 { return float64(r.Proxies) }, "proxies"
	if distinct(medians, scenario, func(r load.Result) int { return r.Proxies }) < 2 {
		x, xLabel = func(r load.Result) float64 { return float64(r.Services) }, "services"
	}
	cpu := plot.New()
	cpu.Title.Text = scenario + ": hub CPU"
	cpu.X.Label.Text, cpu.Y.Label.Text = xLabel, "CPU-seconds"
	rss := plot.New()
	rss.Title.Text = scenario + ": hub peak RSS"
	rss.X.Label.Text, rss.Y.Label.Text = xLabel, "MB"
	var cpuLines, rssLines []any
	for _, mode := range []string{"sotw", "delta"} {
		var c, m plotter.XYs
		for _, r := range medians {
			if r.Scenario == scenario && r.Mode == mode {
				c = append(c, plotter.XY{X: x(r), Y: r.HubCPU})
				m = append(m, plotter.XY{X: x(r), Y: r.PeakRSS})
			}
		}
		if len(c) == 0 {
			continue
		}
		slices.SortFunc(c, func(a, b plotter.XY) int { return cmp.Compare(a.X, b.X) })
		slices.SortFunc(m, func(a, b plotter.XY) int { return cmp.Compare(a.X, b.X) })
		cpuLines = append(cpuLines, mode, c)
		rssLines = append(rssLines, mode, m)
	}
	if len(cpuLines) == 0 {
		return fmt.Errorf("--plot: no %s result to draw (add it to --scenarios)", scenario)
	}
	if err := plotutil.AddLinePoints(cpu, cpuLines...); err != nil {
		return err
	}
	if err := plotutil.AddLinePoints(rss, rssLines...); err != nil {
		return err
	}
	img := vgimg.New(vg.Points(720), vg.Points(300))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Millimeter * 4, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2,
		PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align([][]*plot.Plot{{cpu, rss}}, tiles, dc)
	cpu.Draw(canvases[0][0])
	rss.Draw(canvases[0][1])
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("--plot %s: %w", path, err)
	}
	return f.Close()
}

// distinct counts the different values of key among the scenario's results.
func distinct(rs []load.Result, scenario string, key func(load.Result) int) int {
	seen := map[int]bool{}
	for _, r := range rs {
		if r.Scenario == scenario {
			seen[key(r)] = true
		}
	}
	return len(seen)
}
