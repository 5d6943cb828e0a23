package report

import (
	"fmt"
	"image/color"
	"math"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/shockwave-sched/shockwave/sim"
)

var (
	gridColor = color.Gray{Y: 0xe4}
	refColor  = color.Gray{Y: 0x30}
)

// refStyle is the style of reference lines (ρ = 1, the cluster size).
var refStyle = draw.LineStyle{Color: refColor, Width: vg.Points(1), Dashes: []vg.Length{vg.Points(3), vg.Points(3)}}

// ftfCDF is the empirical CDF of ρ per policy: the share of jobs whose ρ is
// at most x, drawn as a step function.
func ftfCDF(results []*sim.Result) (*figure, error) {
	desc, _ := workload(results)
	p := newPanel("Finish-time fairness, CDF over jobs ("+desc+")",
		"finish-time fairness ρ = JCT / fair-share JCT  (ρ > 1: unfair)",
		"fraction of jobs with ρ ≤ x")
	// ρ is a ratio, so its axis is logarithmic (the data are log2 ρ): 0.5
	// and 2 sit equally far from 1, and a long unfair tail does not squash
	// the rest.
	lo, hi := 0.9, 1.1
	for _, r := range results {
		for _, v := range r.FTF {
			if v > 0 && !math.IsInf(v, 0) {
				lo, hi = math.Min(lo, v/1.1), math.Max(hi, v*1.05)
			}
		}
	}
	lo, hi = math.Log2(lo), math.Log2(hi)
	p.X.Tick.Marker = log2Ticks{}
	p.X.Min, p.X.Max, p.Y.Min, p.Y.Max = lo, hi, 0, 1
	fig := newFigure(figHeight, p)
	for i, r := range results {
		name := label(r.Policy)
		pts := cdfPoints(r.FTF, lo, hi)
		if len(pts) == 0 {
			fig.legend.Add(name+" (no jobs)", &plotter.Line{LineStyle: lineStyle(i)})
			continue
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return nil, fmt.Errorf("policy %s: ρ: %w", r.Policy, err)
		}
		l.LineStyle, l.StepStyle = lineStyle(i), plotter.PostStep
		p.Add(l)
		fig.legend.Add(name, l)
	}
	ref, err := plotter.NewLine(plotter.XYs{{X: 0, Y: 0}, {X: 0, Y: 1}}) // log2 1
	if err != nil {
		return nil, err
	}
	ref.LineStyle = refStyle
	p.Add(ref)
	fig.legend.Add("ρ = 1 (fair)", ref)
	return fig, nil
}

// cdfPoints are the corners of the empirical CDF of log2 xs for a
// post-step line, running on at height 1 up to xEnd. Values below xMin
// (only ever ρ ≤ 0, which has no logarithm) are drawn at xMin; NaN and
// infinite values are left out. No values give no points.
func cdfPoints(xs []float64, xMin, xEnd float64) plotter.XYs {
	s := make([]float64, 0, len(xs))
	for _, v := range xs {
		switch {
		case math.IsNaN(v) || math.IsInf(v, 0):
		case v <= 0:
			s = append(s, xMin)
		default:
			s = append(s, math.Max(math.Log2(v), xMin))
		}
	}
	if len(s) == 0 {
		return nil
	}
	slices.Sort(s)
	n := float64(len(s))
	pts := make(plotter.XYs, 0, len(s)+2)
	pts = append(pts, plotter.XY{X: s[0], Y: 0})
	for i, v := range s {
		pts = append(pts, plotter.XY{X: v, Y: float64(i+1) / n})
	}
	if last := s[len(s)-1]; xEnd > last {
		pts = append(pts, plotter.XY{X: xEnd, Y: 1})
	}
	return pts
}

// clusterTimeline stacks two panels over time: active jobs and busy GPUs.
func clusterTimeline(results []*sim.Result) (*figure, error) {
	desc, uniform := workload(results)
	jobs := newPanel("Cluster over time ("+desc+")", "", "active jobs")
	gpus := newPanel("", "hours since the first arrival", "busy GPUs")
	jobs.Y.Tick.Marker, gpus.Y.Tick.Marker = niceTicks{integer: true}, niceTicks{integer: true}
	fig := newFigure(2*panelHeight, jobs, gpus)
	xMax, peakJobs, peakGPUs := 0.0, 0, 0
	for _, r := range results {
		peakJobs = max(peakJobs, slices.Max(append([]int{0}, r.RoundActive...)))
		peakGPUs = max(peakGPUs, r.GPUs, slices.Max(append([]int{0}, r.RoundBusy...)))
		if n := len(r.RoundStart); n != len(r.RoundActive) || n != len(r.RoundBusy) {
			return nil, fmt.Errorf("policy %s: per-round series differ in length (%d starts, %d active, %d busy)",
				r.Policy, n, len(r.RoundActive), len(r.RoundBusy))
		}
		xMax = math.Max(xMax, r.Makespan/3600)
		if n := len(r.RoundStart); n > 0 {
			xMax = math.Max(xMax, r.RoundStart[n-1]/3600)
		}
	}
	if math.IsNaN(xMax) || xMax <= 0 {
		xMax = 1
	}
	xMax *= 1.02 // so that the last drop does not hide in the frame
	for i, r := range results {
		name := label(r.Policy)
		if len(r.RoundStart) == 0 {
			fig.legend.Add(name+" (no rounds)", &plotter.Line{LineStyle: lineStyle(i)})
			continue
		}
		la, err := stepLine(r, r.RoundActive, i)
		if err != nil {
			return nil, fmt.Errorf("policy %s: active jobs: %w", r.Policy, err)
		}
		lb, err := stepLine(r, r.RoundBusy, i)
		if err != nil {
			return nil, fmt.Errorf("policy %s: busy GPUs: %w", r.Policy, err)
		}
		jobs.Add(la)
		gpus.Add(lb)
		fig.legend.Add(name, la)
	}
	if uniform && results[0].GPUs > 0 {
		g := float64(results[0].GPUs)
		ref, err := plotter.NewLine(plotter.XYs{{X: 0, Y: g}, {X: xMax, Y: g}})
		if err != nil {
			return nil, err
		}
		ref.LineStyle = refStyle
		gpus.Add(ref)
		fig.legend.Add(strconv.Itoa(results[0].GPUs)+" GPUs (cluster)", ref)
	}
	// Leave headroom so that the highest step is not drawn on the frame.
	jobs.Y.Max, gpus.Y.Max = 1.06*float64(peakJobs), 1.06*float64(peakGPUs)
	for _, p := range fig.panels {
		p.X.Min, p.X.Max, p.Y.Min = 0, xMax, 0
		p.Y.Max = math.Max(p.Y.Max, 1)
	}
	return fig, nil
}

// stepLine draws a per-round count as a post-step line over hours: each
// round's value holds until the next round starts, and the last one until
// the makespan, where the line drops to 0.
func stepLine(r *sim.Result, counts []int, i int) (*plotter.Line, error) {
	pts := make(plotter.XYs, 0, len(counts)+2)
	for k, c := range counts {
		pts = append(pts, plotter.XY{X: r.RoundStart[k] / 3600, Y: float64(c)})
	}
	end := r.Makespan / 3600
	if last := pts[len(pts)-1]; end > last.X {
		pts = append(pts, plotter.XY{X: end, Y: last.Y})
	}
	pts = append(pts, plotter.XY{X: pts[len(pts)-1].X, Y: 0})
	l, err := plotter.NewLine(pts)
	if err != nil {
		return nil, err
	}
	l.LineStyle, l.StepStyle = lineStyle(i), plotter.PostStep
	l.LineStyle.Width = vg.Points(1.2)
	return l, nil
}

// summaryBars groups, per policy, a bar for the makespan (full colour) and
// one for the average JCT (light tint), in hours, with their values on top.
func summaryBars(results []*sim.Result) (*figure, error) {
	desc, _ := workload(results)
	p := newPanel("Makespan and average JCT ("+desc+")", "", "hours")
	fig := newFigure(figHeight, p)
	n := len(results)
	// Each group takes 70 % of its slot; the data area is about 13 cm wide.
	slot := 13 * vg.Centimeter / vg.Length(n)
	width := min(slot*0.35, vg.Points(36))
	names := make([]string, n)
	yMax := 0.0
	for i, r := range results {
		names[i] = label(r.Policy)
		ms, jct := r.Makespan/3600, r.AvgJCT/3600
		for k, v := range []float64{ms, jct} {
			text := strconv.FormatFloat(v, 'f', 1, 64)
			if math.IsNaN(v) || math.IsInf(v, 0) {
				v, text = 0, "n/a" // e.g. the average JCT of a run without jobs
			}
			yMax = math.Max(yMax, v)
			c := policyColor(i)
			if k == 1 {
				c = tint(c, 0.55)
			}
			if err := addBar(p, i, v, text, c, width, (vg.Length(k)-0.5)*width); err != nil {
				return nil, fmt.Errorf("policy %s: %w", r.Policy, err)
			}
		}
	}
	p.NominalX(names...)
	// Tilt the policy names when the widest would not fit in its slot.
	widest := vg.Length(0)
	for _, name := range names {
		widest = max(widest, p.X.Tick.Label.Rectangle(name).Size().X)
	}
	if widest > 0.9*slot {
		p.X.Tick.Label.Rotation = math.Pi / 6
		p.X.Tick.Label.XAlign, p.X.Tick.Label.YAlign = draw.XRight, draw.YCenter
	}
	p.X.Min, p.X.Max = -0.6, float64(n)-0.4
	p.Y.Min, p.Y.Max = 0, math.Max(yMax*1.12, 1e-9)
	dark := &plotter.BarChart{Color: color.Gray{Y: 0x50}}
	light := &plotter.BarChart{Color: tint(color.RGBA{0x50, 0x50, 0x50, 0xff}, 0.55)}
	dark.LineStyle.Width, light.LineStyle.Width = vg.Points(0.5), vg.Points(0.5)
	dark.LineStyle.Color, light.LineStyle.Color = color.Black, color.Black
	fig.legend.Add("makespan", dark)
	fig.legend.Add("avg JCT", light)
	return fig, nil
}

// addBar adds one bar of height v at category i, shifted by offset, with
// text printed above it.
func addBar(p *plot.Plot, i int, v float64, text string, c color.Color, width, offset vg.Length) error {
	b, err := plotter.NewBarChart(plotter.Values{v}, width)
	if err != nil {
		return err
	}
	b.XMin, b.Offset, b.Color = float64(i), offset, c
	b.LineStyle.Width = vg.Points(0.5)
	b.LineStyle.Color = color.Gray{Y: 0x20}
	lbl, err := plotter.NewLabels(plotter.XYLabels{
		XYs:    plotter.XYs{{X: float64(i), Y: v}},
		Labels: []string{text},
	})
	if err != nil {
		return err
	}
	lbl.Offset = vg.Point{X: offset, Y: vg.Points(2)}
	for k := range lbl.TextStyle {
		lbl.TextStyle[k].XAlign = draw.XCenter
		setFont(&lbl.TextStyle[k], 8)
	}
	p.Add(b, lbl)
	return nil
}

// tint mixes c with white; f is the share of white.
func tint(c color.Color, f float64) color.RGBA {
	r, g, b, _ := c.RGBA()
	mix := func(v uint32) uint8 { return uint8(float64(v>>8)*(1-f) + 255*f + 0.5) }
	return color.RGBA{mix(r), mix(g), mix(b), 0xff}
}
